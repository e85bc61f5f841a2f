"""Progress and liveness reports from the scripts people bring, in Pods: the operator's half of
``torchjob.autoreport``.

Locally, torchjob puts a ``sitecustomize`` on the replica's ``PYTHONPATH``. In a Pod that would replace the
image's own ``PYTHONPATH`` (the ``ENV`` of many images, which a Pod's env overrides and cannot extend), so the
operator opens another door Python has at start-up: the *user site* folder. It mounts a ConfigMap of the job
(``<job>-autoreport``, owned by the job, a few kB) at ``/opt/torchjob/autoreport`` and sets ``PYTHONUSERBASE``
to it. Python's ``site`` adds ``lib/python3.N/site-packages`` below it to ``sys.path`` and runs the ``.pth``
file there, which imports the folder's copy of torchjob's torch-free reporting modules, starts
``torchjob.autoreport`` and takes the copy out of ``sys.modules`` and ``sys.path`` again (the script's own
``import torchjob`` finds the image's torchjob, or none): from the first optimizer step, the process beats to
the operator's report endpoint every second.

Where Python does not open that door nothing changes, and the job runs as it would without torchjob: a virtual
environment without system site packages, ``python -s``, a non-root user whose effective uid differs. A
container that sets ``PYTHONUSERBASE`` or ``PYTHONNOUSERSITE`` itself is left alone, and
``torchjob.io/auto-report: "false"`` turns it off for the job.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from torchjob import worker_files
from torchjob.api import extensions
from torchjob.api.types import PyTorchJob
from torchjob.autoreport import INJECTED_BOOT

MOUNT = "/opt/torchjob/autoreport"
VOLUME = "torchjob-autoreport"
# Python 3.8 to 3.14: the folder ``site`` looks in is named after the interpreter's version.
_MINOR_VERSIONS = range(8, 15)
# torchjob.autoreport and what it imports: the standard library and these, nothing else (no torch).
_MODULES = ("__init__.py", "autoreport.py", "beats.py", "reporting.py", "sections.py", "worker_files.py")
_BOOT = '''"""Mounted by the torchjob operator: starts torchjob.autoreport. Never fails a script.

It runs while Python's site module is still at work, before the image's own site-packages are on sys.path: the
copy of torchjob next to it is imported, started, and then taken out of sys.modules and sys.path again, so that
the script's own `import torchjob` finds the image's torchjob (or none), exactly as without the operator.
"""
import os
import sys


def _ours(name):
    return name == "torchjob" or name.startswith("torchjob.")


_reporter = None
_autoreport = None
# This file is <mount>/lib/python3.N/site-packages/; torchjob's modules are in <mount>/lib/torchjob/.
_lib = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_before = {name: module for name, module in sys.modules.items() if _ours(name)}
sys.path.insert(0, _lib)
try:
    from torchjob import autoreport

    autoreport.start()
    _reporter = autoreport._reporter
    _autoreport = autoreport
except Exception:
    pass
finally:
    sys.path.remove(_lib)
    for _name in [name for name in sys.modules if _ours(name)]:
        del sys.modules[_name]
    sys.modules.update(_before)


def stand_down():
    """The script reports through torchjob.train: its MetricsLogger calls this (through autoreport.stand_down),
    and beats on with what this returns, where the reporter has been beating."""
    handed = None
    if _reporter is not None:
        try:
            handed = _reporter.handover() if _reporter.active else None
        except Exception:
            handed = None
        _reporter.active = False
    return handed


def restart_in_child():
    """Another local rank forked from this process (torchjob.train's local_ranks): its own reporter."""
    global _reporter
    if _autoreport is not None:
        try:
            _autoreport._restart_own()  # a no-op where it never started, or stood down
            _reporter = _autoreport._reporter
        except Exception:
            _reporter = None
'''
# Left to the container where it sets them: they decide whether and where Python looks for a user site.
_ITS_OWN = ("PYTHONUSERBASE", "PYTHONNOUSERSITE")


def wanted(job: PyTorchJob) -> bool:
    return job.annotation(extensions.AUTO_REPORT) != "false"


def config_map_name(job: PyTorchJob) -> str:
    return f"{job.name}-autoreport"


def config_map(job: PyTorchJob, owner: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap the replicas' Pods mount: the boot module, its ``.pth`` line, and torchjob's modules."""
    package = resources.files("torchjob")
    data = {f"torchjob.{name}": package.joinpath(name).read_text() for name in _MODULES}
    data[f"{INJECTED_BOOT}.py"] = _BOOT
    data["autoreport.pth"] = f"import {INJECTED_BOOT}\n"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(job),
            "namespace": job.namespace,
            "labels": {"app.kubernetes.io/managed-by": "torchjob"},
            "ownerReferences": [owner],
        },
        "data": data,
    }


def _items() -> list[dict[str, str]]:
    """Where each key of the ConfigMap lands below the mount: the boot files once per Python version."""
    items = [{"key": f"torchjob.{name}", "path": f"lib/torchjob/{name}"} for name in _MODULES]
    for minor in _MINOR_VERSIONS:
        site = f"lib/python3.{minor}/site-packages"
        items.append({"key": "autoreport.pth", "path": f"{site}/torchjob-autoreport.pth"})
        items.append({"key": f"{INJECTED_BOOT}.py", "path": f"{site}/{INJECTED_BOOT}.py"})
    return items


def with_autoreport(spec: dict[str, Any], job: PyTorchJob) -> dict[str, Any]:
    """A Pod spec whose containers' Python processes report their steps and beats (see the module docstring)."""
    volume = {"name": VOLUME, "configMap": {"name": config_map_name(job), "items": _items()}}
    spec.setdefault("volumes", []).append(volume)
    for container in spec.get("containers") or []:
        env = container.setdefault("env", [])
        if any(e.get("name") in _ITS_OWN for e in env):
            continue
        env += [
            {"name": "PYTHONUSERBASE", "value": MOUNT},
            {"name": worker_files.ENV_AUTOREPORT, "value": "1"},
        ]
        container.setdefault("volumeMounts", []).append({"name": VOLUME, "mountPath": MOUNT, "readOnly": True})
    return spec
