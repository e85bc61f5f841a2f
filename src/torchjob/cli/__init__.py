"""The ``torchjob`` command line: one module per verb, each a thin layer over ``torchjob.sdk``."""
