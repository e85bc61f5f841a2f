"""The tables of the benchmarks run on this machine alone: launch, a kill, a hang, elastic groups, steady
throughput, checkpoints, the CLI and the dashboard."""

from __future__ import annotations

from bench.report import Row, Table
from bench.tables.figures import Figure, added, all_of, at_most, over
from bench.tables.headline import (
    KILL_IN_PLACE,
    LAUNCH_COLLECTIVE,
    LAUNCH_DDP,
    LAUNCH_README,
    README_KILL_ADDS,
    STOP_IN_PLACE,
)

LAUNCH = Table(
    "launch",
    "Launch",
    (
        LAUNCH_COLLECTIVE,
        LAUNCH_DDP,
        LAUNCH_README,
        Row("the same trials, every sample (s)", "launch", "{ddp torchjob.samples:.2f}", "{ddp torchrun.samples:.2f}"),
    ),
)

KILL = Table(
    "kill",
    "A rank SIGKILLed: in place, warm and cold group restarts, torchrun",
    (
        KILL_IN_PLACE,
        Row(
            "… in place, of which: detection / membership published / group re-formed (s)",
            "kill",
            "{in place detection:.3f} / {in place membership:.3f} / {in place re-form:.3f}",
        ),
        Row(
            "… every sample, kill → first step (s)",
            "kill",
            "{in place first step.samples:.2f}",
            "warm {warm restart first step.samples:.2f}; torchrun {torchrun first step.samples:.2f}",
        ),
        Row(
            "… how each ended",
            "kill",
            "in place: {in place outcome.text}; warm: {warm restart outcome.text}; cold: {cold restart outcome.text}",
            "torchrun: {torchrun outcome.text}",
        ),
        README_KILL_ADDS,
        Row(
            "… in place, time the kill adds to the in-place job",
            "kill",
            "{in place:.1f s}",
            derived={"in place": added("in place")},
            also=("in place job killed", "in place job clean"),
        ),
        Row(
            "… a warm group restart, where the time goes: detection / stop / start / rendezvous / checkpoint load / "
            "steps redone (s)",
            "kill",
            "{warm restart detection:.2f} / {warm restart stop:.2f} / {warm restart warm start:.2f} / "
            "{warm restart rendezvous:.2f} / {warm restart checkpoint load:.2f} / {warm restart steps redone:.2f}",
            "cold: {cold restart detection:.2f} / {cold restart stop:.2f} / {cold restart warm start:.2f} / "
            "{cold restart rendezvous:.2f} / {cold restart checkpoint load:.2f} / {cold restart steps redone:.2f}",
        ),
        Row(
            "… held-out accuracy, killed / clean (lowest of the trials is what matters; medians shown)",
            "kill",
            "warm {warm restart accuracy killed:.3f} / {warm restart accuracy clean:.3f}; in place "
            "{in place accuracy killed:.3f} / {in place accuracy clean:.3f}",
            "torchrun {torchrun accuracy killed:.3f} / {torchrun accuracy clean:.3f}",
        ),
        Row(
            "the README's job end to end, no kill (s); the warm interpreter's RSS",
            "kill",
            "{warm restart job clean:.1f s} warm; {warm interpreter RSS:.0f MB}",
            "{cold restart job clean:.1f s} cold; {torchrun job clean:.1f s} torchrun",
        ),
    ),
)

HANG = Table(
    "hang",
    "A rank frozen by SIGSTOP",
    (
        STOP_IN_PLACE,
        Row(
            "… in place, the stop → the repair published (s); held-out accuracy",
            "hang",
            "{in place repair published:.2f}; {in place accuracy:.3f}",
            "group restart: accuracy {restart accuracy:.3f}",
        ),
    ),
)

HANGS = Table(
    "hangs",
    "Hang detection with no tuning (a plain script that never imports torchjob)",
    (
        Row(
            "SIGSTOP of a rank → named as hung",
            "hangs",
            "{frozen named hung:.1f s} ({frozen named hung.got} of {frozen named hung.n} named; "
            "Succeeded after: {frozen succeeded.samples:.0f})",
            "gloo's timeout 1800 s; NVRx defaults 2700/3600 s; torchrun, Kubeflow: never",
            "≤ 10 s",
            at_most("frozen named hung", 10.0),
        ),
        Row(
            "a rank stops between collectives, alive (a deadlock) → Hung",
            "hangs",
            "{deadlock named hung:.1f s} (learned deadline {deadlock learned deadline:.0f s}; Succeeded after: "
            "{deadlock succeeded.samples:.0f})",
            "gloo's timeout 1800 s; NVRx defaults 2700/3600 s; torchrun, Kubeflow: never",
            "found, no tuning",
            lambda cases: cases["deadlock named hung"].ok,
        ),
        Row(
            "60 s start, 20 s progress deadline, 2 CPU hogs beside it: first attempts that ran through (1 each)",
            "hangs",
            "{slow start clean.samples:.0f} (step {slow start step:.3f s}, longest gap {slow start longest gap:.2f} "
            "s, learned deadline {slow start learned deadline:.0f s})",
            "",
            "no false alarm",
            all_of("slow start clean"),
        ),
    ),
)

ELASTIC = Table(
    "elastic",
    "An elastic member lost",
    (
        Row(
            "SIGKILL of a member → first step of the smaller group, 3 → 2 ranks",
            "elastic",
            "**{in place first step:.2f s}** in place",
            "{torchrun agents first step:.1f s} torchrun's agents by hand, Kubeflow's env "
            "({torchrun agents first step.failed} of {torchrun agents first step.n} never)",
            "≤ 0.5 s",
            at_most("in place first step", 0.5),
        ),
        Row(
            "… the replacement joins, 2 → 3 ranks: agreed after the kill / the others paused for (s)",
            "elastic",
            "{in place grow at:.1f} / {in place grow pause:.2f}",
        ),
        Row(
            "the same loss with torchrun's own agents under torchjob (c10d, min 1, max 2)",
            "elastic",
            "{torchjob agents first step:.1f s} ({torchjob agents first step.failed} of "
            "{torchjob agents first step.n} never)",
            "{torchrun agents first step:.1f s} torchrun's agents by hand",
            ratio=over("torchjob agents first step", "torchrun agents first step"),
        ),
    ),
)

STEADY = Table(
    "steady",
    "Steady state",
    (
        Row(
            "MNIST training throughput, rank 0, 3 ranks (samples/s)",
            "steady",
            "{torchjob samples:.0f}",
            "{torchrun samples:.0f} torchrun",
            "≥ 0.98× torchrun",
            lambda cases: over("torchjob samples", "torchrun samples")(cases) >= 0.98,
        ),
        Row(
            "the controller while 3 replicas train: CPU s per s; peak RSS",
            "steady",
            "{controller cpu:.3f}; {controller rss:.0f MB}",
            "",
            "≈ 0; < 80 MB",
            lambda cases: cases["controller cpu"].value < 0.05 and cases["controller rss"].value < 80,
        ),
    ),
)


def _block_ratio(mode: str) -> Figure:
    return lambda cases: cases["none block"].value / cases[f"{mode} block"].value


CHECKPOINT = Table(
    "checkpoint",
    "Checkpoint overhead",
    (
        Row(
            "throughput with a checkpoint every 25 steps, ÷ none; sync / async",
            "checkpoint",
            "{sync:.2f} / **{async:.2f}** ({checkpoint size:.0f MB} each)",
            "none: {none block:.2f s} per 25 steps",
            "async ≥ 0.97",
            lambda cases: _block_ratio("async")(cases) >= 0.97,
            derived={"sync": _block_ratio("sync"), "async": _block_ratio("async")},
            also=("sync block", "async block"),
        ),
    ),
)

CLI = Table(
    "cli",
    "The CLI and bad input",
    (
        *(
            Row(
                f"{label} (s)",
                "cli",
                f"{{{case}:.3f}}",
                "{python:.3f} `python -c pass`",
                "< 0.3",
                at_most(case, 0.3),
            )
            for case, label in (
                ("list", "`torchjob list`, 1,000 jobs"),
                ("get", "`torchjob get`, 1,000 jobs"),
                ("help", "`torchjob --help`"),
            )
        ),
        Row(
            "bad input: the slowest of the invalid files refused (s)",
            "refusals",
            "{slowest refusal:.2f} ({slowest file.text}, of {files.text}); the median file {median refusal:.2f}",
            "{valid job:.2f} validating the valid MNIST job",
            "< 1 s",
            at_most("slowest refusal", 1.0),
        ),
    ),
)

DASHBOARD = Table(
    "dashboard",
    "The dashboard, 1,000 jobs",
    (
        Row(
            "`torchjob ui`: GET / → first byte / whole page (s)",
            "dashboard",
            "{first byte:.2f} / {whole page:.2f}",
            "{cli list:.2f} `torchjob list` on the same records",
        ),
        Row(
            "chromium: navigation → a table with every job's row (s)",
            "dashboard",
            "{rendered:.2f}",
            "{cli list:.2f} `torchjob list`",
            "< 2 s",
            at_most("rendered", 2.0),
        ),
    ),
)
