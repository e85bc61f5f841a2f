"""The raw records every benchmark keeps: one JSON line per measured case, in ``bench/results/<benchmark>.jsonl``.

A line holds every sample of the case (``null`` for a trial that never got there), their median, how many trials
ran and failed, and what the number stands on: the run it came from (one invocation of a benchmark, so a case and
its anchor share a ``run``), the commit and whether the tree was dirty, the date, the machine (cores, memory,
kernel, CPU) and the versions of torch and of each anchor. The published tables are made from these lines alone
(``python -m bench report``), so nothing here imports torch or a cluster: reading records must stay cheap.

A benchmark adds its cases to a :class:`Run` while it measures; they are written together when it ends, so a
benchmark that fails half-way leaves no half of a comparison behind.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RIG_VERSIONS = ROOT / "rig" / "src" / "kuberig" / "scripts" / "versions.env"


def median(values: Iterable[float]) -> float:
    found = list(values)
    return statistics.median(found) if found else float("nan")


@dataclass(frozen=True)
class Record:
    """One case of one run, as kept on disk."""

    benchmark: str
    case: str
    unit: str
    samples: list[float | None]
    run: str
    date: str
    commit: str
    dirty: bool
    mode: str
    machine: dict[str, Any]
    versions: dict[str, str]
    text: str = ""  # a case that is a description (an operator's behaviour), not a number
    median: float | None = None
    trials: int = 0
    failed: int = 0

    @staticmethod
    def from_line(line: str) -> Record:
        data = json.loads(line)
        known = set(Record.__dataclass_fields__)
        return Record(**{key: value for key, value in data.items() if key in known})

    def line(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else ""


def commit() -> tuple[str, bool]:
    """The checkout's commit, and whether its tracked or new files differ from it (records themselves and the
    documentation aside: neither runs)."""
    # Each porcelain line is "XY PATH": two status letters (either may be a space, the first line's too), a space.
    lines = _git("status", "--porcelain").splitlines()
    changed = [line for line in lines if not _read_only(line[3:])]
    return _git("rev-parse", "--short=10", "HEAD").strip() or "unknown", bool(changed)


def _read_only(path: str) -> bool:
    return path.startswith(("bench/results/", "docs/")) or path.endswith(".md")


def machine() -> dict[str, Any]:
    memory_kb = 0
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_kb = int(line.split()[1])
        model = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            model,
        )
    except OSError:
        pass
    return {
        "cores": os.cpu_count() or 0,
        "memory_gib": round(memory_kb / 2**20, 1),
        "kernel": platform.release(),
        "cpu": model,
        "python": platform.python_version(),
    }


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def rig_versions() -> dict[str, str]:
    """The test cluster's pinned versions (Kubernetes, Kubeflow's operators, Kueue...), as the rig builds them."""
    found: dict[str, str] = {}
    for line in RIG_VERSIONS.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.endswith("_VERSION"):
            found[key[: -len("_VERSION")].lower().replace("_", "-")] = value.strip()
    return found


@dataclass
class Run:
    """One invocation of a benchmark: the samples it took, case by case, written together by :meth:`save`."""

    benchmark: str
    mode: str = "full"
    anchors: Mapping[str, str] = field(default_factory=dict)  # anchor → its version, beside torch's
    started: datetime.datetime = field(default_factory=lambda: datetime.datetime.now(datetime.timezone.utc))
    samples: dict[str, list[float | None]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    checkout: tuple[str, bool] = field(default_factory=commit)  # as the run began: what it measures

    @property
    def id(self) -> str:
        return f"{self.benchmark}-{self.started.strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}"

    def keep(self, case: str, value: float | None, unit: str = "s") -> None:
        """One more sample of ``case`` (None: a trial that did not get there)."""
        self._name(case, unit).append(value)

    def _name(self, case: str, unit: str) -> list[float | None]:
        if set(case) & set(":.[]{}!"):
            raise ValueError(f"case {case!r}: a case name is a format field of the tables: no : . [ ] {{ }} !")
        self.units[case] = unit
        return self.samples.setdefault(case, [])

    def add(self, case: str, samples: Sequence[float | None], unit: str = "s") -> None:
        """Every sample of ``case`` at once."""
        self._name(case, unit).extend(samples)

    def describe(self, case: str, text: str) -> None:
        """A case that is a description, not a number (what an operator shows after a failure)."""
        self._name(case, "")
        self.texts[case] = text

    @property
    def records(self) -> list[Record]:
        revision, dirty = self.checkout
        now, dirty_now = commit()  # code changed while it ran: what ran is not one commit
        dirty = dirty or dirty_now or now != revision
        found = []
        for case, samples in self.samples.items():
            measured = [float(s) for s in samples if s is not None]
            found.append(
                Record(
                    benchmark=self.benchmark,
                    case=case,
                    unit=self.units.get(case, "s"),
                    samples=[None if s is None else round(float(s), 4) for s in samples],
                    median=round(median(measured), 4) if measured else None,
                    trials=len(samples),
                    failed=len(samples) - len(measured),
                    text=self.texts.get(case, ""),
                    run=self.id,
                    date=self.started.strftime("%Y-%m-%d"),
                    commit=revision,
                    dirty=dirty,
                    mode=self.mode,
                    machine=machine(),
                    versions={"torch": package_version("torch"), **self.anchors},
                )
            )
        return found

    def save(self, directory: Path = RESULTS) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.benchmark}.jsonl"
        lines = "".join(record.line() + "\n" for record in self.records)
        with path.open("a") as out:
            out.write(lines)
        return path


def load(directory: Path = RESULTS) -> list[Record]:
    """Every record kept, oldest first within each benchmark's file."""
    found: list[Record] = []
    for path in sorted(directory.glob("*.jsonl")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                found.append(Record.from_line(line))
            except (ValueError, TypeError) as err:
                raise ValueError(f"{path}:{number}: not a benchmark record ({err})") from err
    return found
