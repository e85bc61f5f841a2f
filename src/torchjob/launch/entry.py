"""How ``python [-u] SCRIPT ARGS...`` or ``python [-u] -m MODULE ARGS...`` runs, read from its arguments alone.

A warm start must be indistinguishable for the script, so only these forms start warm; anything else (an option
that changes how Python starts, a script from standard input) starts cold, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

# Options that only change buffering, which the warm start applies too.
_UNBUFFERED = ("-u",)


@dataclass(frozen=True)
class WarmEntry:
    """How a warm process runs the replica: a script file, or a module, as ``__main__`` with ``argv``."""

    module: bool  # True: ``target`` is a module name (``-m``); False: a file path
    target: str
    argv: list[str]  # sys.argv as a cold ``python`` would set it (argv[0] rewritten by runpy for -m)
    unbuffered: bool = False


# How a Pod's trainer says in its log that it starts cold, before the reason: the launcher's words (pod.py), and
# the operator's boot line's where the image has no torchjob to launch it (backends/kubernetes/warm_pods.py).
POD_COLD_START = "torchjob: the script starts cold and restarts with its Pod: "


@dataclass(frozen=True)
class ColdStart:
    """Why a replica starts cold; said once in its log."""

    reason: str


def python_entry(args: list[str]) -> WarmEntry | ColdStart:
    """How ``python ARGS`` runs (``args``: the interpreter's arguments, without the interpreter)."""
    unbuffered = False
    while args and args[0].startswith("-") and args[0] != "-":
        option = args[0]
        if option in _UNBUFFERED:
            unbuffered, args = True, args[1:]
        elif option == "-m" and len(args) >= 2:
            return WarmEntry(module=True, target=args[1], argv=[args[1], *args[2:]], unbuffered=unbuffered)
        else:
            return ColdStart(f"the interpreter option {option} changes how Python starts")
    if not args or args[0] == "-":
        return ColdStart("the script comes from standard input")
    return WarmEntry(module=False, target=args[0], argv=list(args), unbuffered=unbuffered)
