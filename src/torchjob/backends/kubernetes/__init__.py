"""The Kubernetes backend: pure mappings from a PyTorchJob to Kubernetes objects (the operator comes later)."""
