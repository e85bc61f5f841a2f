"""The tables of the benchmarks across group widths (3 to 32 ranks): a rank lost, stopped or launched at each
width beside torchrun and torchft, and what a repair is made of at each."""

from __future__ import annotations

from collections.abc import Callable

from bench.report import Cases, Row, Table
from bench.tables.figures import over


def _width_row(ranks: int) -> Row:
    at = f"at {ranks}"
    wide = ranks == max(WIDTHS)
    return Row(
        f"{ranks} ranks: a rank SIGKILLed → first step of the group after it (detection / membership / re-form)",
        "width",
        f"**{{in place first step {at}:.2f s}}** in place ({{in place detection {at}:.2f}} / "
        f"{{in place membership {at}:.2f}} / {{in place re-form {at}:.2f}})",
        f"{{warm restart first step {at}:.2f s}} warm group restart; torchrun `--max-restarts`: "
        f"{{torchrun first step {at}:.2f s}} ({{torchrun first step {at}.got}} of {{torchrun first step {at}.n}} "
        "recovered)",
        "≤ 1.0 s and ≤ 1.5× the 3-rank figure" if wide else "",
        _flat(ranks) if wide else None,
        also=("in place first step at 3",) if wide else (),
        ratio=over(f"in place first step {at}", f"warm restart first step {at}"),
    )


def _flat(ranks: int) -> Callable[[Cases], bool]:
    wide, narrow = f"in place first step at {ranks}", "in place first step at 3"
    return lambda cases: (
        cases[wide].ok and cases[wide].value <= min(1.0, 1.5 * cases[narrow].value) if cases[narrow].ok else False
    )


def _torchft_row(ranks: int) -> Row:
    at = f"at {ranks}"
    ours, back = f"in place first step {at}", f"torchft replacement {at}"
    survivors, in_flight = f"torchft survivors in a new quorum {at}", f"torchft next commit {at}"
    return Row(
        f"{ranks} ranks: a rank SIGKILLed → the survivors' next step without it / the full group back",
        "width",
        f"**{{{ours}:.2f s}}** / **{{{ours}:.2f s}}** in place (the survivors wait for the spare)",
        f"torchft 0.2.0: {{{survivors}:.2f s}} / {{{back}:.1f s}} (its replacement restarted at once, healed "
        f"from a peer; the step in flight committed at {{{in_flight}:.2f s}})",
        "survivors ≤ torchft's + 0.05 s; full group ≤ 0.1× torchft's",
        lambda cases: (
            cases[ours].ok
            and cases[ours].value <= cases[survivors].value + 0.05
            and cases[ours].value <= 0.1 * cases[back].value
        ),
    )


def _elastic_row() -> Row:
    survivors, whole = "elastic in place first step at {n}", "elastic in place whole at {n}"
    return Row(
        "a rank SIGKILLed → the survivors' next step without it / the full group back, the elastic in-place job "
        "(N Workers, at least N − 1), at 3 / 8 / 16 / 32 ranks",
        "width",
        "**"
        + _at_every_width("{" + survivors + ":.2f}")
        + " s** / "
        + _at_every_width("{" + whole + ":.1f}")
        + " s (the survivors go on smaller; the replacement, started for the place, joins when warm)",
        "torchft 0.2.0: "
        + _at_every_width("{torchft survivors in a new quorum at {n}:.2f}")
        + " s / "
        + _at_every_width("{torchft replacement at {n}:.1f}")
        + " s",
        "survivors ≤ torchft's + 0.05 s; full group ≤ 0.1× torchft's, at every N",
        lambda cases: all(
            cases[survivors.format(n=ranks)].ok
            and cases[survivors.format(n=ranks)].value
            <= cases[f"torchft survivors in a new quorum at {ranks}"].value + 0.05
            and cases[whole.format(n=ranks)].ok
            and cases[whole.format(n=ranks)].value <= 0.1 * cases[f"torchft replacement at {ranks}"].value
            for ranks in WIDTHS
        ),
    )


def _at_every_width(template: str) -> str:
    """``template`` (a case name with ``{n}`` for the width, and a format) at every width, joined by `` / ``."""
    return " / ".join(template.replace("{n}", str(ranks)) for ranks in WIDTHS)


def _every_width_within(cases: Cases, case: str, limit: float) -> bool:
    return all(
        cases[case.replace("{n}", str(ranks))].ok and cases[case.replace("{n}", str(ranks))].value <= limit
        for ranks in WIDTHS
    )


def _launch_halves(cases: Cases) -> bool:
    return all(over(f"warm restart launch at {ranks}", f"torchrun launch at {ranks}")(cases) <= 0.5 for ranks in WIDTHS)


WIDTHS = (3, 8, 16, 32)  # bench.width's
WIDTH = Table(
    "width",
    "Repair, detection, launch and memory as the group grows (local processes on 2 cores)",
    (
        *(_width_row(ranks) for ranks in WIDTHS),
        *(_torchft_row(ranks) for ranks in WIDTHS),
        _elastic_row(),
        Row(
            "a rank frozen by SIGSTOP → the rank found, at 3 / 8 / 16 / 32 ranks, nothing tuned",
            "width",
            "in place: **" + _at_every_width("{in place frozen found at {n}:.1f}") + " s** (the frozen member "
            "found, the repair published); the README job: **"
            + _at_every_width("{restart frozen named hung at {n}:.1f}")
            + " s** (named Hung)",
            "torchrun, gloo: never before gloo's 30-minute time-out",
            "≤ 5 s at every N",
            lambda cases: (
                _every_width_within(cases, "in place frozen found at {n}", 5.0)
                and _every_width_within(cases, "restart frozen named hung at {n}", 5.0)
            ),
        ),
        Row(
            "`torchjob run` → every rank's first step, at 3 / 8 / 16 / 32 ranks (the README job; in place)",
            "width",
            "**"
            + _at_every_width("{warm restart launch at {n}:.1f}")
            + " s**; in place "
            + _at_every_width("{in place launch at {n}:.1f}")
            + " s",
            "torchrun " + _at_every_width("{torchrun launch at {n}:.1f}") + " s; torchft (to its first committed "
            "step) " + _at_every_width("{torchft launch at {n}:.1f}") + " s",
            "≤ 0.5× torchrun at every N",
            _launch_halves,
        ),
        Row(
            "the job's memory while it trains (the PSS of the launcher and every process under it), at 3 / 8 / 16 / "
            "32 ranks",
            "width",
            "**" + _at_every_width("{warm restart memory at {n}:,.0f}") + " MiB** (the README job); in place "
            "(with its spare) " + _at_every_width("{in place memory at {n}:,.0f}") + " MiB",
            "torchrun " + _at_every_width("{torchrun memory at {n}:,.0f}") + " MiB",
            "≤ 0.6× torchrun at 32",
            lambda cases: over("warm restart memory at 32", "torchrun memory at 32")(cases) <= 0.6,
        ),
        Row(
            "accuracy after the kill, at 3 / 8 / 16 / 32 ranks (in place; warm restart)",
            "width",
            _at_every_width("{in place accuracy at {n}:.3f}"),
            _at_every_width("{warm restart accuracy at {n}:.3f}"),
        ),
    ),
)


def _repair_parts_row(ranks: int) -> Row:
    at = f"at {ranks}"
    return Row(
        f"{ranks} ranks: a rank SIGKILLed → the repaired group's first step (detection / membership / formed / "
        "state / step)",
        "repair-width",
        f"**{{first step {at}:.2f s}}** ({{detection {at}:.2f}} / {{membership {at}:.2f}} / {{formed {at}:.2f}} / "
        f"{{state {at}:.2f}} / {{step {at}:.2f}}); beyond one usual step: **{{beyond a step {at}:.2f s}}**",
        f"one usual step at this width: {{usual step {at}:.3f s}} (the repair took {{in steps:.1f}} of them)",
        derived={"in steps": over(f"first step {at}", f"usual step {at}")},
        also=(f"first step {at}", f"usual step {at}"),
    )


REPAIR_WIDTH = Table(
    "repair-width",
    "Where an in-place repair's time goes as the group grows, beside the width's usual step (local, 2 cores)",
    (
        *(_repair_parts_row(ranks) for ranks in WIDTHS),
        Row(
            "accuracy after the kill, at 3 / 8 / 16 / 32 ranks",
            "repair-width",
            _at_every_width("{accuracy at {n}:.3f}"),
        ),
    ),
    columns=("torchjob in place", "the same trials"),
    judged=False,
)
