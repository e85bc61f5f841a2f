"""torchjob: run Kubeflow PyTorchJob files locally (processes) or on Kubernetes, with recovery that works."""

__version__ = "0.1.0"
