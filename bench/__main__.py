"""``python -m bench``: measure, keep the raw records, make the published tables again.

    python -m bench                      every benchmark (local, then cluster; about 1 hour 50 on the 2-core VM)
    python -m bench --quick              the headline rows only (launch, a killed rank: about 10 minutes)
    python -m bench --only kill,launch   some benchmarks (--tier local|cluster: one tier)
    python -m bench --list               the benchmarks, their tiers and how long each takes
    python -m bench report [--check]     the tables from bench/results/ alone (--check: fail where one is stale)

Each benchmark appends its records to ``bench/results/<name>.jsonl`` once it has finished (``bench/records.py``),
then the tables are made again (``bench/report.py``). Tests never assert times; this is where speed and memory
are judged, each figure beside an anchor measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench import report
from bench.records import Run
from bench.registry import BENCHMARKS, BY_NAME, CLUSTER, LOCAL, Benchmark, anchor_versions


def _chosen(args: argparse.Namespace) -> list[Benchmark]:
    if args.only:
        names = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in names if name not in BY_NAME]
        if unknown:
            raise SystemExit(f"bench: --only: no benchmark {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
        return [BY_NAME[name] for name in names]
    found = [b for b in BENCHMARKS if args.tier in (None, b.tier)]
    return [b for b in found if b.quick is not None] if args.quick else found


def measure(benchmarks: list[Benchmark], quick: bool) -> int:
    failed = []
    began = time.monotonic()
    for benchmark in benchmarks:
        trials = (benchmark.quick or benchmark.trials) if quick else benchmark.trials
        print(f"== {benchmark.name}: {benchmark.about} ({trials} trials) ...", flush=True)
        run = Run(benchmark.name, "quick" if quick else "full", anchor_versions(benchmark))
        started = time.monotonic()
        try:
            benchmark.recorder()(run, trials)
        except Exception as err:  # noqa: BLE001 - one benchmark's failure must not lose the others' records
            print(f"== {benchmark.name}: FAILED after {time.monotonic() - started:.0f} s: {err!r}", flush=True)
            failed.append(benchmark.name)
            continue
        path = run.save()
        print(f"== {benchmark.name}: {len(run.records)} cases in {time.monotonic() - started:.0f} s → {path}")
    print(f"== all: {time.monotonic() - began:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    report.main([])
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["report"]:
        return report.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the headline rows only, in about 10 minutes")
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--tier", choices=(LOCAL, CLUSTER))
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        for b in BENCHMARKS:
            quick = f"quick {b.quick}" if b.quick else "full only"
            print(f"{b.name:12} {b.tier:8} {b.trials} trials ({quick}), ~{b.minutes} min: {b.about}")
        return 0
    return measure(_chosen(args), args.quick)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
