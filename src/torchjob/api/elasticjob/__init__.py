"""TorchElastic's ElasticJob (``elastic.pytorch.org/v1alpha1``) and its etcd rendezvous, lowered to the
PyTorchJob the planner drives."""
