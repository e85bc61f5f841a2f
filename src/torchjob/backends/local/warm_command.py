"""Whether a replica's command can start warm (forked from the job's warm interpreter, warm_interpreter.py) and how.

No side effects; it reads the file system only to resolve the command as ``exec`` would.

A warm start runs the script in a process forked from an interpreter that has already imported torch, instead
of a fresh ``python`` that imports it again (seconds per rank, on every restart). It must be indistinguishable
for the script, so only commands whose meaning is certain start warm:

- ``python [-u] SCRIPT ARGS...`` and ``python [-u] -m MODULE ARGS...``, where ``python`` is the interpreter
  torchjob runs in (a bare ``python``/``python3`` on the replica's PATH resolves to it: mapping.py puts its
  folder first);
- a console script of that interpreter (``torchrun`` and the like): a file in its folder whose ``#!`` line
  names it.

Anything else starts cold, as before, with the reason: another interpreter, an option that changes how
Python starts (``-X``, ``-O``, ``-W``, ``-c``...), or a ``PYTHON*`` variable that is read only at start-up.
A job opts out with ``torchjob.io/warm-start: "false"``.
"""

from __future__ import annotations

import os
from pathlib import Path

from torchjob.launch.entry import ColdStart, WarmEntry, python_entry

# Read by Python only while it starts; a warm process started long ago cannot honour a replica's own value.
# PYTHONPATH and PYTHONUNBUFFERED are the exceptions: the warm start applies them itself (warm_interpreter.py).
_APPLIED_WARM = ("PYTHONPATH", "PYTHONUNBUFFERED")
# What a console script's first line may hold besides the interpreter's path.
_SHEBANG = "#!"


def warm_entry(
    command: list[str], env: dict[str, str], cwd: str, python: str, inherited_env: dict[str, str]
) -> WarmEntry | ColdStart:
    """How ``command`` (a replica's argv, its environment ``env`` set over ``inherited_env``) starts warm under
    ``python`` (the interpreter torchjob runs in), or why it cannot."""
    if not command:
        return ColdStart("no command")
    merged = {**inherited_env, **env}
    for name in sorted(merged):
        if name.startswith("PYTHON") and name not in _APPLIED_WARM and merged[name] != inherited_env.get(name):
            return ColdStart(f"{name} is read only when Python starts")
    program = _resolve(command[0], merged.get("PATH", ""), cwd)
    if program is None:
        return ColdStart(f"{command[0]!r} is not on the replica's PATH")
    if _same_file(program, python):
        return python_entry(command[1:])
    if _console_script_of(program, python):
        return WarmEntry(module=False, target=program, argv=[program, *command[1:]])
    return ColdStart(f"{command[0]!r} is not the Python torchjob runs in, nor one of its console scripts")


def _resolve(program: str, path: str, cwd: str) -> str | None:
    if "/" in program:
        candidate = os.path.join(cwd, program)
        return candidate if os.path.isfile(candidate) else None
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _same_file(a: str, b: str) -> bool:
    # A venv's python is a link to the base interpreter: compare the files named, not where the links lead,
    # or a python from another venv (other site-packages) would pass for this one.
    try:
        return os.path.samefile(a, b) and (Path(a).parent.resolve() == Path(b).parent.resolve())
    except OSError:
        return False


def _console_script_of(program: str, python: str) -> bool:
    if Path(program).parent.resolve() != Path(python).parent.resolve():
        return False
    try:
        with open(program, "rb") as f:
            first = f.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return False
    if not first.startswith(_SHEBANG):
        return False
    interpreter = first[len(_SHEBANG) :].strip().split()[0] if first[len(_SHEBANG) :].strip() else ""
    return _same_file(interpreter, python)
