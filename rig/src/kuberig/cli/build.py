"""build what the rig runs from the Go module proxy and Debian's packages, into the cache"""

from __future__ import annotations

import argparse

from kuberig import toolchain


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", choices=toolchain.BUILDS, action="append", help="build only these (repeatable)")


def run(args: argparse.Namespace) -> int:
    toolchain.build(*(args.only or ()))
    print(f"kube-rig: built into {toolchain.cache_dir()}")
    return 0
