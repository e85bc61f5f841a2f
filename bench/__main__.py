"""``python -m bench [--quick]``: run every benchmark, print one markdown table, write it to bench/RESULTS.md.

Each row: the metric, torchjob's number, the anchor's (measured in the same run), their ratio, the target,
and whether it was met. Tests never assert times; this is where speed and memory are judged.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from pathlib import Path

from bench import checkpoint, cli, elastic, inplace, launch, operator, recovery, refusals, steady_state, warm_restart

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def _row(metric: str, value: str, anchor: str, ratio: float | None, target: str, met: bool) -> str:
    shown = "" if ratio is None else f"{ratio:.2f}"
    return f"| {metric} | {value} | {anchor} | {shown} | {target} | {'yes' if met else '**no**'} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer trials (noisier)")
    args = parser.parse_args()
    trials = 3 if args.quick else 5

    print("CLI ...", flush=True)
    cli_times = cli.measure(trials + 2)
    print("refusing bad input ...", flush=True)
    refused = refusals.measure()
    print("launch latency ...", flush=True)
    lat = launch.measure(trials)
    lat_ddp = launch.measure(trials, "ddp")
    print("steady state ...", flush=True)
    steady = steady_state.measure(2 if args.quick else 4)
    print("recovery ...", flush=True)
    recovered = recovery.measure(3)
    floor = recovery.cold_ddp_start_seconds()
    print("warm restarts of the README's job ...", flush=True)
    warm = warm_restart.measure(2 if args.quick else 3)
    print("in-place repair ...", flush=True)
    mended = inplace.measure(2 if args.quick else 3)
    print("elastic member loss ...", flush=True)
    reformed = elastic.measure(3)
    print("checkpoint overhead ...", flush=True)
    ckpt = checkpoint.measure(8 if args.quick else 16)
    print(f"operator: {operator.JOBS} jobs x {operator.REPLICAS} replicas on the kwok rig ...", flush=True)
    scale = operator.measure()

    lat_ratio = lat["torchjob"] / lat["torchrun"]
    ddp_ratio = lat_ddp["torchjob"] / lat_ddp["torchrun"]
    sps_ratio = steady.torchjob_samples_per_second / steady.torchrun_samples_per_second
    rows = [
        "| metric | torchjob | anchor | ratio | target | met |",
        "|---|---|---|---|---|---|",
        _row(
            "launch → first collective on 3 ranks (median s)",
            f"{lat['torchjob']:.2f}",
            f"torchrun {lat['torchrun']:.2f}",
            lat_ratio,
            "ratio ≤ 0.90",
            lat_ratio <= 0.90,
        ),
        _row("launch floor: bare spawn of 3 processes (median s)", f"{lat['bare']:.2f}", "", None, "—", True),
        _row(
            "launch → first DDP step on 3 ranks (median s)",
            f"{lat_ddp['torchjob']:.2f}",
            f"torchrun {lat_ddp['torchrun']:.2f}; bare spawn {lat_ddp['bare']:.2f}",
            ddp_ratio,
            "ratio ≤ 0.5",
            ddp_ratio <= 0.5,
        ),
        _row(
            "MNIST training throughput, rank 0 (samples/s)",
            f"{steady.torchjob_samples_per_second:.0f}",
            f"torchrun {steady.torchrun_samples_per_second:.0f}",
            sps_ratio,
            "ratio ≥ 0.98",
            sps_ratio >= 0.98,
        ),
        _row(
            "controller CPU while 3 replicas train (CPU s per s)",
            f"{steady.controller_cpu_per_second:.3f}",
            "",
            None,
            "≈ 0",
            steady.controller_cpu_per_second < 0.05,
        ),
        _row(
            "controller peak RSS supervising 3 replicas (MB)",
            f"{steady.controller_peak_rss_mb:.0f}",
            "",
            None,
            "< 80",
            steady.controller_peak_rss_mb < 80,
        ),
    ]
    tj, tj_failed = recovered["torchjob"]
    tr, tr_failed = recovered["torchrun"]

    def shown(value: float | None, failed: int, timeout: float = recovery.TIMEOUT) -> str:
        text = "did not recover" if value is None else f"{value:.2f}"
        return text + (f" ({failed} of 3 trials did not recover in {timeout:.0f} s)" if failed else "")

    rows += [
        _row(
            "recovery: SIGKILL of a rank → first step of the next attempt (median s)",
            shown(tj, tj_failed),
            f"torchrun --max-restarts {shown(tr, tr_failed)}",
            tj / tr if tj and tr else None,
            f"≤ floor + 3 s ({floor + 3:.1f})",
            tj is not None and tj <= floor + 3 and not tj_failed,
        ),
        _row("recovery floor: cold process, import torch + build DDP (median s)", f"{floor:.2f}", "", None, "—", True),
    ]
    first_step = mended["first_step"]
    added = float(mended["job-inplace.yaml killed"]) - float(mended["job-inplace.yaml"])  # type: ignore[arg-type]
    restart_added = float(mended["job.yaml killed"]) - float(mended["job.yaml"])  # type: ignore[arg-type]
    rows += [
        _row(
            "in-place repair: SIGKILL of a rank → first step of the repaired group, 3 ranks (median s)",
            f"{first_step:.2f} ({mended['repaired']} repaired)" if isinstance(first_step, float) else "none",
            f"group restart {tj:.2f}" if tj else "",
            first_step / tj if isinstance(first_step, float) and tj else None,
            "≤ 0.5 s",
            isinstance(first_step, float) and first_step <= 0.5,
        ),
        _row(
            "MNIST job with rank 1 SIGKILLed: time added to the whole job (median s; held-out accuracy clean/killed)",
            f"in place {added:.1f} (accuracy {mended['job-inplace.yaml accuracy']:.3f}"
            f"/{mended['job-inplace.yaml killed accuracy']:.3f})",
            f"group restart {restart_added:.1f}",
            added / restart_added if restart_added > 0 else None,
            "≤ 2 s",
            added <= 2.0,
        ),
    ]
    rows += warm_restart.rows(warm)
    ej, ej_failed = reformed["torchjob"]
    er, er_failed = reformed["torchrun"]
    rows.append(
        _row(
            "elastic: SIGKILL of a member → first step of the smaller group (median s)",
            shown(ej, ej_failed, elastic.TIMEOUT),
            f"torchrun agents, Kubeflow env {shown(er, er_failed, elastic.TIMEOUT)}",
            ej / er if ej and er else None,
            f"≤ floor + 3 s ({floor + 3:.1f})",
            ej is not None and ej <= floor + 3 and not ej_failed,
        )
    )
    shrunk, pause = mended["elastic_first_step"], mended["elastic_grow_pause"]  # see bench/inplace.py
    rows += [
        _row(
            "elastic in place: SIGKILL of a member → first step of the smaller group, 3 → 2 ranks (median s)",
            f"{shrunk:.2f} ({mended['elastic_repaired']} shrank)" if isinstance(shrunk, float) else "none",
            f"torchrun re-rendezvous {shown(ej, ej_failed, elastic.TIMEOUT)}",
            shrunk / ej if isinstance(shrunk, float) and ej else None,
            "≤ 0.5 s",
            isinstance(shrunk, float) and shrunk <= 0.5,
        ),
        _row(
            "elastic in place: the replacement joins, 2 → 3 ranks: the others pause for (median s)",
            f"{pause:.2f} (joined {mended['elastic_grow_at']:.1f} s after the kill)"
            if isinstance(pause, float)
            else "-",
            "",
            None,
            "—",
            isinstance(pause, float),
        ),
    ]
    rows += [
        _row(
            f"throughput with sync checkpoints every {checkpoint.EVERY} steps ({ckpt.checkpoint_mb:.0f} MB)",
            "",
            f"no checkpoints {ckpt.baseline_steps_per_second:.1f} steps/s",
            ckpt.sync_ratio,
            "—",
            True,
        ),
        _row(
            f"throughput with async checkpoints every {checkpoint.EVERY} steps ({ckpt.checkpoint_mb:.0f} MB)",
            "",
            f"no checkpoints {ckpt.baseline_steps_per_second:.1f} steps/s",
            ckpt.async_ratio,
            "ratio ≥ 0.97",
            ckpt.async_ratio >= 0.97,
        ),
    ]
    for verb, label in (
        ("list", "`torchjob list`, 1,000 jobs"),
        ("get", "`torchjob get`, 1,000 jobs"),
        ("help", "`torchjob --help`"),
    ):
        rows.append(
            _row(
                f"{label} (median s)",
                f"{cli_times[verb]:.3f}",
                f"python -c pass {cli_times['python']:.3f}",
                None,
                "< 0.3",
                cli_times[verb] < 0.3,
            )
        )
    rows.append(_row(*refusals.row(refused)))
    scale_ratio = scale.operator_seconds / scale.indexed_job_seconds
    verbs = ", ".join(f"{verb} {count / operator.JOBS:.1f}" for verb, count in sorted(scale.requests_by_verb.items()))
    rows += [
        _row(
            f"operator: {operator.JOBS} jobs × {operator.REPLICAS} replicas submitted at once → all Pods Running (s)",
            f"{scale.operator_seconds:.1f}",
            f"Indexed Jobs (kube job controller) {scale.indexed_job_seconds:.1f}",
            scale_ratio,
            "ratio ≤ 1.5",
            scale_ratio <= 1.5,
        ),
        _row(
            "operator: API requests per job until Running",
            f"{scale.requests_per_job:.1f} ({verbs})",
            "",
            None,
            "≤ 20",
            scale.requests_per_job <= 20,
        ),
        _row(
            f"operator: peak RSS with {operator.JOBS} jobs (MB)",
            f"{scale.peak_rss_mb:.0f}",
            "",
            None,
            "< 150",
            scale.peak_rss_mb < 150,
        ),
    ]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    table = "\n".join([f"Measured {stamp} on {machine} (`python -m bench`):", "", *rows])
    print(table)
    RESULTS.write_text(table + "\n")


if __name__ == "__main__":
    main()
