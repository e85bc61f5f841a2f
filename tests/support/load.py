"""A busy machine for tests that must not mistake load for a hang: processes that only burn CPU."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _burn(stop: Any) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


@contextmanager
def cpu_hogs(count: int = 1) -> Iterator[None]:
    """``count`` processes that keep a core busy each, for the ``with`` block."""
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    try:
        yield
    finally:
        stop.set()
        for hog in hogs:
            hog.join()
