"""The examples' one flag on how FSDP2 treats the model beside ``--replicas``: whether each block's gathered
weights are freed after its forward (``--reshard-after-forward``), and the rule its ``auto`` follows."""

from __future__ import annotations

import argparse


def add_reshard_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reshard-after-forward",
        choices=("auto", "yes", "no"),
        default="auto",
        help="free each block's gathered weights after its forward (FSDP2's option; no: gathered once per step, "
        "the whole model's weights held through the backward); auto: yes under FSDP, no under HSDP",
    )


def reshard_after_forward(args: argparse.Namespace) -> bool:
    """The flag's answer for this run. Under HSDP the shard groups are small and every shard has copies anyway:
    one all-gather per step, not two."""
    chosen: str = args.reshard_after_forward
    return chosen == "yes" or (chosen == "auto" and args.replicas == 1)
