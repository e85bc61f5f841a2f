"""The ``torchjob`` command line: one module per verb, each a thin layer over ``torchjob.sdk``.

Every verb's module is imported to build the parser, so what only some verbs need is imported inside their
handlers: the Kubernetes client and the operator (0.2-0.3 s), reading a job file (its models, 30 ms), the
planner, the local controller, the dashboard's server, Jinja2, PyYAML. ``bench.cli`` holds ``list``, ``get``
and ``--help`` under 0.3 s, and ``tests/unit/test_cli_start.py`` names what the start must not import.
Everything else is imported at the top.
"""
