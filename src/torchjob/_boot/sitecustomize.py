"""Put first on a local replica's PYTHONPATH by torchjob: starts ``torchjob.autoreport`` (progress and liveness
reports from scripts that never import torchjob), then runs the ``sitecustomize`` it shadows, if any, so that
the environment's own start-up hook still runs. Anything that goes wrong here is swallowed: the script runs
exactly as it would without torchjob."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    from torchjob import autoreport

    autoreport.start()
except Exception:  # noqa: BLE001 - never let a report break the user's script
    pass

_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None and _spec.origin != os.path.abspath(__file__):
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["sitecustomize"] = _module
    _spec.loader.exec_module(_module)
