"""load image NAME FOLDER: build an image from a folder (on the Debian base) and push it under any name"""

from __future__ import annotations

import argparse
from pathlib import Path

from kuberig.cli import options
from kuberig.images.load import folder_files


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=("image",))
    parser.add_argument("image", help="the image's full name, registry host included (docker.io/team/train:1)")
    parser.add_argument("folder", type=Path, help="a folder whose files the image holds")
    parser.add_argument("--at", default="/workspace", help="where the folder lands in the image (and its workdir)")
    parser.add_argument("--cmd", nargs=argparse.REMAINDER, help="the image's command (the rest of the line)")
    options.add_cluster(parser)


def run(args: argparse.Namespace) -> int:
    cluster = options.cluster(args)
    digest = cluster.push_image(args.image, folder_files(args.folder, args.at), workdir=args.at, cmd=args.cmd or None)
    print(f"kube-rig: pushed {args.image} ({digest}) to {cluster.registry}")
    return 0
