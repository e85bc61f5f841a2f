"""Kubeflow Trainer v2's TrainJob and training runtimes, lowered to the PyTorchJob the planner drives."""
