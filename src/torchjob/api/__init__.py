"""The PyTorchJob API (kubeflow.org/v1): wire-format types, Kubeflow's defaults, and validation.

Import from the submodules (``torchjob.api.types``, ``.loading``, ...); this package imports nothing itself.
"""
