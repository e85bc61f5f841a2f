"""What a warm interpreter imports before it forks, and how it keeps those imports cheap for what it forks."""

from __future__ import annotations

import gc
import importlib
import itertools
import sys

# What every warm interpreter imports: torch, its distributed package, and what DDP's constructor pulls in.
# torch._dynamo last of torch's: what comes before it is frozen (SAFE_TO_FREEZE).
TORCH = ("torch", "torch.distributed", "torch.nn.parallel", "torch.utils.data", "torch.optim", "torch._dynamo")
# The preloads whose objects are frozen (see _freeze): the leading ones of the list that are among these.
SAFE_TO_FREEZE = frozenset({"torch", "torch.distributed", "torch.nn.parallel", "torch.utils.data", "torch.optim"})
# torchjob's own modules a replica imports: its progress reports, and the worker library with the TensorBoard
# writer its metrics open (together ~60 ms a process: paid once here instead of by every rank at every start,
# 2 CPU-seconds of a 32-rank group restart on this machine). None of them starts a thread or reads the
# environment at import. The local warm interpreter's (warm_client.py); a warm Pod's launcher keeps TORCH alone.
LIBRARY = ("torchjob.autoreport", "torchjob.train", "torch.utils.tensorboard")
# What a script may not need at its start (preload_scan.py): imported after the first replicas are forked then.
DEFERRABLE = frozenset({"torch._dynamo"})


def with_extra(base: tuple[str, ...], extra: str) -> list[str]:
    """``base``, then the comma-separated module names of ``extra`` that it lacks (a job's own preloads)."""
    added = [name.strip() for name in extra.split(",") if name.strip()]
    return [*base, *(name for name in added if name not in base)]


def staged(modules: list[str], defer: bool) -> tuple[list[str], list[str]]:
    """``modules`` as what to import before the first fork and what after it: the DEFERRABLE ones after, if
    ``defer``."""
    later = [name for name in modules if defer and name in DEFERRABLE]
    return [name for name in modules if name not in later], later


def preload(modules: list[str]) -> list[str]:
    """Import what the replicas will import; the names that failed (a replica will say why itself)."""
    core = list(itertools.takewhile(SAFE_TO_FREEZE.__contains__, modules))
    # No automatic collection while importing: an import makes few cycles, yet the collector walks everything
    # allocated so far each time it runs (5% of the import's time here). One full collection at the end puts
    # what survived in the oldest generation, so no forked process walks it again in its first young one.
    collecting = gc.isenabled()
    gc.disable()
    try:
        failed = _import(core)
        if core:
            _freeze()
        failed += _import(modules[len(core) :])
        gc.collect()
    finally:
        if collecting:
            gc.enable()
    sys.stdout.flush()
    sys.stderr.flush()
    return failed


def _import(modules: list[str]) -> list[str]:
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that cannot be preloaded is imported cold by the script
            failed.append(name)
    return failed


def _freeze() -> None:
    """Put what the interpreter holds now out of the collector's sight (gc.freeze, made for servers that fork):
    a replica's full collections, the last one at its exit above all, then neither walk torch's objects nor
    copy their pages by touching them. That last collection took a second, and a group restart waits for it
    in every survivor. Only torch's core is frozen: torch._dynamo brings in Triton, whose nanobind bindings
    print every object of theirs still alive at exit as a leak, and a frozen object is never collected."""
    gc.collect()
    gc.freeze()
