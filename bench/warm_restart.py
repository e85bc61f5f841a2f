"""What a lost rank costs the README's own job, started warm (the default) and cold (the anchor), in one run (#27).

The job is ``examples/mnist/job.yaml`` unchanged (1 Master + 2 Workers, 8 epochs, checkpoints every epoch),
run with ``torchjob run``. In a *kill* trial, rank 1's training process is SIGKILLed once its log says it is in
epoch 3; the group restarts from the last checkpoint. Each mode runs with and without the kill, interleaved:

- **added by the kill**: median job time with the kill − median without (the number a user feels);
- **kill → next attempt started**: detection and stopping the survivors (the new replicas' start times);
- **kill → first step of the next attempt**: the above, plus start-up, rendezvous and the checkpoint load;
- **the split** of the kill's cost into phases (restart_split.py): detection, stop, warm start, rendezvous,
  checkpoint load, steps redone;
- the job's accuracy, which the kill must not change; and the warm interpreter's memory (RSS).

    .venv/bin/python -m bench.warm_restart [TRIALS]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.launch import BIN
from bench.measure import median
from bench.restart_split import PHASES, AttemptWatch, split

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mnist"
TIMEOUT = 240.0


def _job_file(work: Path, warm: bool) -> Path:
    for source in EXAMPLE.glob("*.py"):
        shutil.copy(source, work / source.name)
    job = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    if not warm:
        job["metadata"]["annotations"] = {"torchjob.io/warm-start": "false"}
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _rank1_trainer(home: Path) -> psutil.Process | None:
    try:
        local = json.loads((home / "jobs" / "mnist" / "local.json").read_text())
        shim = next(p["pid"] for p in local["processes"] if p["replica"] == "worker-0" and p["attempt"] == 0)
        found = [c for c in psutil.Process(shim).children(recursive=True) if "train.py" in " ".join(c.cmdline())]
    except (OSError, ValueError, StopIteration, psutil.Error):
        return None
    return found[0] if found else None


def _first_step_of_attempt_1(home: Path) -> float | None:
    """When the first batch line of attempt 1 was written (the log's modification time when it first has one)."""
    log = home / "jobs" / "mnist" / "logs" / "1" / "worker-0.log"
    try:
        return log.stat().st_mtime if re.search(r"batch: \d+/", log.read_text()) else None
    except OSError:
        return None


def trial(warm: bool, kill: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    home = work / "home"
    try:
        argv = [str(BIN / "torchjob"), "run", str(_job_file(work, warm))]
        env = {**os.environ, "TORCHJOB_HOME": str(home)}
        started = time.monotonic()
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=work)
        result: dict[str, Any] = {}
        log = home / "jobs" / "mnist" / "logs" / "0" / "worker-0.log"
        warm_rss = 0.0
        killed_at: float | None = None
        first_step: float | None = None
        watch = AttemptWatch(home)
        while process.poll() is None and time.monotonic() - started < TIMEOUT:
            if killed_at is None or watch.done:  # not while the restart is timed: it would load the machine
                warm_rss = max(warm_rss, _warm_interpreter_rss())
            if kill and killed_at is None and log.exists() and "epoch: 3/" in log.read_text():
                victim = _rank1_trainer(home)
                if victim is not None:
                    watch.at_kill()
                    killed_at = time.time()
                    victim.send_signal(signal.SIGKILL)
            if killed_at is not None and first_step is None:
                first_step = _first_step_of_attempt_1(home)
            if killed_at is not None and not watch.done:
                watch.poll()
            time.sleep(0.01 if killed_at is not None and not watch.done else 0.05)
        output = process.communicate(timeout=TIMEOUT)[0].decode()
        result["seconds"] = time.monotonic() - started
        accuracy = re.findall(r"test accuracy=([0-9.]+)", output)
        result["accuracy"] = float(accuracy[-1]) if accuracy else None
        result["ok"] = process.returncode == 0
        result["warm_rss_mb"] = warm_rss
        if killed_at is not None:
            local = json.loads((home / "jobs" / "mnist" / "local.json").read_text())
            restarted = min(p["started_at"] for p in local["processes"] if p["attempt"] == 1)
            result["to_restart"] = restarted - killed_at
            result["to_first_step"] = (first_step or restarted) - killed_at
            result["split"] = split(home, killed_at, watch)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _warm_interpreter_rss() -> float:
    for candidate in psutil.process_iter():
        try:
            if "(warm interpreter)" in " ".join(candidate.cmdline()):
                return float(candidate.memory_info().rss) / 2**20
        except psutil.Error:
            continue
    return 0.0


def measure(trials: int = 3) -> dict[str, dict[str, float]]:
    runs: dict[tuple[bool, bool], list[dict[str, Any]]] = {}
    for _ in range(trials):
        for warm in (True, False):
            for kill in (False, True):
                runs.setdefault((warm, kill), []).append(trial(warm, kill))
    summary: dict[str, dict[str, float]] = {}
    for warm in (True, False):
        plain, killed = runs[(warm, False)], runs[(warm, True)]
        summary["warm" if warm else "cold"] = {
            "job": median([r["seconds"] for r in plain]),
            "added": median([r["seconds"] for r in killed]) - median([r["seconds"] for r in plain]),
            "to_restart": median([r["to_restart"] for r in killed if "to_restart" in r] or [float("nan")]),
            "to_first_step": median([r["to_first_step"] for r in killed if "to_first_step" in r] or [float("nan")]),
            "accuracy_killed": min((r["accuracy"] or 0.0) for r in killed),
            "accuracy_plain": min((r["accuracy"] or 0.0) for r in plain),
            "failed": float(sum(not r["ok"] for r in plain + killed)),
            "rss_mb": max(r["warm_rss_mb"] for r in plain + killed),
        }
        for phase in PHASES:  # the split, each phase's median over the trials where its end was seen
            seen = [r["split"][phase] for r in killed if phase in r.get("split", {})]
            summary["warm" if warm else "cold"][phase] = median(seen) if seen else float("nan")
    return summary


def rows(summary: dict[str, dict[str, float]]) -> list[str]:
    """The benchmark table's rows (bench/__main__.py's format)."""
    warm, cold = summary["warm"], summary["cold"]
    added = warm["added"] / cold["added"] if cold["added"] > 0 else float("nan")
    return [
        f"| README job, rank 1 SIGKILLed in epoch 3: time the kill adds (median s; accuracy killed) | "
        f"{warm['added']:.2f} warm ({warm['accuracy_killed']:.3f}) | {cold['added']:.2f} cold start "
        f"({cold['accuracy_killed']:.3f}) | {added:.2f} | ≤ 3.0 s | {_met(warm['added'] <= 3.0)} |",
        f"| the same: kill → next attempt started / → its first logged step (median s) | "
        f"{warm['to_restart']:.2f} / {warm['to_first_step']:.2f} | {cold['to_restart']:.2f} / "
        f"{cold['to_first_step']:.2f} | | — | yes |",
        f"| the split (median s): {', '.join(PHASES)} | {_split(warm)} | {_split(cold)} cold | | — | yes |",
        f"| README job end to end, no kill (median s); warm interpreter RSS | {warm['job']:.1f}; "
        f"{warm['rss_mb']:.0f} MB | {cold['job']:.1f} cold | {warm['job'] / cold['job']:.2f} | — | yes |",
    ]


def _split(found: dict[str, float]) -> str:
    return " / ".join(f"{found[phase]:.2f}" for phase in PHASES)


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


if __name__ == "__main__":
    result = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    print(json.dumps(result, indent=2))
    print("\n".join(rows(result)))
