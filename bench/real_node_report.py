"""The table ``python -m bench.real_node`` prints: each operator's medians and behaviour, side by side."""

from __future__ import annotations

from statistics import median

from bench.real_node import BEHAVIOURS, OperatorRun


def _median(values: list[float]) -> str:
    return f"{median(values):.1f}" if values else "n/a"


def report(results: dict[str, OperatorRun]) -> str:
    rows = ["| on the real node | torchjob operator | Kubeflow training-operator v1.8.1 |", "|---|---|---|"]
    t, k = results["torchjob"], results["kubeflow"]
    if t.to_running or k.to_running:  # not measured with --recovery
        rows.append(f"| apply → both Pods Running (median s) | {_median(t.to_running)} | {_median(k.to_running)} |")
        rows.append(
            f"| apply → Succeeded, 1 epoch (median s) | {_median(t.to_succeeded)} | {_median(k.to_succeeded)} |"
        )

    def recovered(times: list[float | None]) -> str:
        ok = [r for r in times if r is not None]
        return f"{len(ok)} of {len(times)}" + (f", median {median(ok):.1f} s" if ok else "")

    rows.append(
        "| SIGKILL of the Worker's trainer: recovered, kill → its first step "
        f"| {recovered(t.recovery)} | {recovered(k.recovery)} |"
    )
    if t.warm_recovery:
        rows.append(
            '| the same with `torchjob.io/warm-start: "true"` (the Pods stay; each launcher forks the script again) '
            f"| {recovered(t.warm_recovery)} | no warm restart: the row above |"
        )
    repaired = [r for r in t.inplace if r is not None]
    if t.inplace:
        rows.append(
            f"| the same kill in the in-place MNIST job (1 warm spare Pod): repaired, kill → first step of the "
            f"repaired group (→ re-formed) | {len(repaired)} of {len(t.inplace)}"
            + (
                f", median {median(r['first_step'] for r in repaired):.2f} s "
                f"({median(r['reformed'] for r in repaired):.2f} s), survivors' Pods untouched"
                if repaired
                else ""
            )
            + " | no in-place repair: the row above |"
        )
    lost = [_median([float(s) for s in run.steps_lost]) for run in (t, k)]
    rows.append(f"| steps lost (plain script, no checkpoint) | {lost[0]} | {lost[1]} |")
    if not t.behaviour:
        return "\n".join(rows)
    rows += ["", "| behaviour | torchjob operator | Kubeflow training-operator v1.8.1 |", "|---|---|---|"]
    for label in BEHAVIOURS:
        rows.append(f"| {label} | {t.behaviour.get(label, '')} | {k.behaviour.get(label, '')} |")
    return "\n".join(rows)
