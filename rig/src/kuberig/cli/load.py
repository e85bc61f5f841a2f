"""load image NAME FOLDER: build an image from a folder (on the Debian base) and push it under any name.

The image holds the folder at ``--at`` (its working directory unless ``--workdir`` says otherwise), and, unless
``--no-node-python``, the node's Python environment on ``python3``'s path (torch included: every kubelet node
lends it to its containers). ``--entrypoint`` and ``--cmd`` set what it runs, as a Dockerfile's ENTRYPOINT and CMD
do: a job that gives only ``args`` (as TorchElastic's jobs do) runs the entrypoint with them.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from kuberig.cli import options
from kuberig.images.load import env_pairs, folder_files


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=("image",))
    parser.add_argument("image", help="the image's full name, registry host included (docker.io/team/train:1)")
    parser.add_argument("folder", type=Path, help="a folder whose files the image holds")
    parser.add_argument("--at", default="/workspace", help="where the folder lands in the image (default %(default)s)")
    parser.add_argument("--workdir", help="the image's working directory (default: where the folder lands)")
    parser.add_argument(
        "--entrypoint", help="what the image runs, as one shell-quoted string ('python3 -m torch.distributed.run')"
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="an environment variable (repeatable)"
    )
    parser.add_argument(
        "--no-node-python",
        action="store_true",
        help="leave the node's Python environment (torch) off python3's path",
    )
    parser.add_argument("--cmd", nargs=argparse.REMAINDER, help="the image's command (the rest of the line)")
    options.add_cluster(parser)


def run(args: argparse.Namespace) -> int:
    entrypoint = shlex.split(args.entrypoint) if args.entrypoint else None
    files = folder_files(args.folder, args.at, node_python=not args.no_node_python)
    cluster = options.cluster(args)
    digest = cluster.push_image(
        args.image,
        files,
        workdir=args.workdir or args.at,
        cmd=args.cmd or None,
        entrypoint=entrypoint,
        env=env_pairs(args.env),
    )
    print(f"kube-rig: pushed {args.image} ({digest}) to {cluster.registry}")
    return 0
