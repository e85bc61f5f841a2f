"""``torchjob metrics NAME [--plot FILE.png | --tensorboard]``: per-rank training metrics written by torchjob.train."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from torchjob.cli.common import local_client
from torchjob.sdk.errors import SdkError


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("metrics", help="summarise (and plot) a job's per-rank training metrics")
    p.add_argument("name")
    p.add_argument("--plot", metavar="FILE.png", help="draw loss and throughput per rank into this file")
    p.add_argument(
        "--tensorboard", action="store_true", help="print the job's TensorBoard log folder (tensorboard --logdir it)"
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.tensorboard:
        logdir = local_client(args).tensorboard_dir(args.name)
        if not logdir.is_dir():
            raise SdkError(f"job {args.name!r} has no TensorBoard logs (its script does not use MetricsLogger)")
        print(logdir)
        return 0
    ranks = local_client(args).metrics(args.name)
    if not ranks:
        raise SdkError(f"job {args.name!r} has no metrics (its script does not use torchjob.train.MetricsLogger)")
    rows = [("RANK", "STEPS", "LAST LOSS", "SAMPLES/S", "STEP MS", "CHECKPOINT S")]
    for rank, records in sorted(ranks.items()):
        if not records:
            continue
        tail = records[-max(1, len(records) // 10) :]  # the last tenth: where training ended up
        rows.append(
            (
                str(rank),
                str(records[-1]["step"]),
                f"{statistics.fmean(r['loss'] for r in tail):.4f}",
                f"{statistics.median(r['samples_per_second'] for r in records):.0f}",
                f"{1000 * statistics.median(r['step_seconds'] for r in records):.1f}",
                f"{sum(r.get('checkpoint_seconds', 0.0) for r in records):.2f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if args.plot:
        plot(ranks, args.plot, args.name)
        print(f"plot written to {args.plot}")
    return 0


def plot(ranks: dict[int, list[dict[str, Any]]], path: str, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SdkError("plotting needs matplotlib: pip install 'torchjob[train]'") from None
    figure, (loss_axis, speed_axis) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for rank, records in sorted(ranks.items()):
        steps = [r["step"] for r in records]
        loss_axis.plot(steps, [r["loss"] for r in records], label=f"rank {rank}", linewidth=0.8)
        speed_axis.plot(steps, [r["samples_per_second"] for r in records], label=f"rank {rank}", linewidth=0.8)
    loss_axis.set_ylabel("loss")
    loss_axis.set_title(f"{title}: training metrics per rank")
    loss_axis.legend()
    speed_axis.set_ylabel("samples / s")
    speed_axis.set_xlabel("step")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
