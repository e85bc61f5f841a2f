"""Helpers the verbs share: the client, and how ages and states are printed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchjob.sdk.local import LocalClient


def client(args: argparse.Namespace) -> LocalClient:
    # Imported here so `torchjob --help` does not load the SDK.
    from torchjob.sdk.local import LocalClient

    home = getattr(args, "home", None)
    return LocalClient(Path(home) if home else None)


def human_age(seconds: float) -> str:
    """Like kubectl: 45s, 12m, 3h, 5d."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
