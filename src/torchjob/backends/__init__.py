"""Substrates that run a job's replicas: local processes (``local/``) and Kubernetes Pods (``kubernetes/``),
both carrying out the one planner's actions through the ``base.Backend`` protocol."""
