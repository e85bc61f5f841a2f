"""Kubernetes resource quantities, as far as torchjob reads them: a container's CPU, in cores."""

from __future__ import annotations

from typing import Any


def cpu_cores(quantity: object) -> float | None:
    """``"500m"`` is 0.5, ``"2"`` or ``2`` is 2.0, ``"1.5"`` is 1.5; None where absent or not a CPU quantity."""
    if isinstance(quantity, bool) or not isinstance(quantity, (int, float, str)):
        return None
    text = str(quantity).strip()
    try:
        cores = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None
    return cores if cores > 0 else None


def container_cpu(container: Any) -> float | None:
    """The cores a container may use: its CPU limit, else its request (the share it is guaranteed); None
    where it names neither."""
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict):
        return None
    for kind in ("limits", "requests"):
        given = resources.get(kind)
        cores = cpu_cores(given.get("cpu")) if isinstance(given, dict) else None
        if cores is not None:
            return cores
    return None
