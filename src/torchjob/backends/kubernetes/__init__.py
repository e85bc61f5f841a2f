"""The Kubernetes backend: pure manifests (``mapping``) and observations (``observing``), the API client, and
the backend the operator (``controller/operator.py``) reconciles jobs with."""
