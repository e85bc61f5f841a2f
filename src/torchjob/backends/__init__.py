"""Substrates that run a job's replicas: local processes, and (later) Kubernetes pods."""
