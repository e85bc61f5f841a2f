"""``kube-rig``: one module per verb (kind's ``pkg/cmd/kind/<verb>``), each with ``add(subparsers)`` and ``run``.

    kube-rig build                         build what the rig runs, into the cache (once per machine)
    kube-rig create [--real-nodes N] [--kwok-nodes N] [--name NAME] [--dir D] [--config FILE]
    kube-rig delete [--name NAME] [--dir D]
    kube-rig get nodes|kubeconfig [--dir D]
    kube-rig load image NAME FOLDER [--at PATH] [--cmd ...] [--dir D]
    kube-rig node stop|start NODE [--dir D]
    kube-rig export logs DEST [--dir D]
    kube-rig status [--dir D]

``up`` and ``down`` are kept as the older names of ``create`` and ``delete``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from types import ModuleType

from kuberig.cli import build, create, delete, export, get, load, node, status

VERBS: dict[str, ModuleType] = {
    "build": build,
    "create": create,
    "delete": delete,
    "get": get,
    "load": load,
    "node": node,
    "export": export,
    "status": status,
}
ALIASES = {"up": "create", "down": "delete"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kube-rig", description="A Kubernetes cluster for tests on one machine, with no Docker (kuberig)."
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    for name, module in VERBS.items():
        aliases = [alias for alias, verb in ALIASES.items() if verb == name]
        module.add(verbs.add_parser(name, aliases=aliases, help=(module.__doc__ or "").strip().split("\n")[0]))
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = VERBS[ALIASES.get(args.verb, args.verb)].run
    try:
        return run(args)
    except (RuntimeError, ValueError, FileNotFoundError, subprocess.CalledProcessError) as err:
        print(f"kube-rig: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
