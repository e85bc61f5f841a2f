"""Joining the process group: backend and device chosen for this machine, one small object back."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from datetime import timedelta
from types import TracebackType

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

from torchjob import worker_files
from torchjob.train import c_heap, generations, local_ranks
from torchjob.train.context import DistContext
from torchjob.train.devices import plan_device
from torchjob.train.env import LaunchInfo, detect_launch


def init(backend: str | None = None, timeout_seconds: float = 1800.0) -> DistContext:
    """Join the process group described by the environment (see ``torchjob.train.env``).

    ``backend`` defaults to nccl where each process on this machine has a GPU of its own, to gloo over the shared
    GPUs where they are fewer, and to gloo on the CPU without one (``torchjob.train.devices``). A
    single process still gets a (one-member) process group, so the same script runs everywhere. A replica of
    several processes that nothing else started (``nprocPerNode`` with the script run directly) starts the
    others here, before CUDA is touched (``local_ranks``).
    """
    local_ranks.start()
    c_heap.keep_freed_memory()  # before the model's first step: its tensors come back from the heap each step
    if os.environ.get(worker_files.ENV_SPARE):
        _record_uncaught_exceptions()
        chosen = backend or "gloo"
        return generations.wait_as_spare(chosen, torch.device("cpu"), timedelta(seconds=timeout_seconds))
    info: LaunchInfo = detect_launch(os.environ)
    _record_uncaught_exceptions()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    plan = plan_device(info, gpus, os.environ, backend)
    chosen = plan.backend
    _require_backend(chosen)
    device = torch.device("cpu") if plan.cuda_index is None else torch.device("cuda", plan.cuda_index)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized() and os.environ.get(worker_files.ENV_STORE) and info.launcher == "torchjob":
        # In-place repair: the group meets at the store torchjob hosts, which outlives any member.
        generations.absorb_first_ddp()
        attempt = int(os.environ.get(worker_files.ENV_ATTEMPT, "0"))
        timeout = timedelta(seconds=timeout_seconds)
        generations.init_generation(chosen, attempt, 0, info.rank, info.world_size, timeout)
    if not dist.is_initialized():
        if info.launcher in ("torchrun", "torchjob", "kubeflow"):
            # env:// reads MASTER_ADDR/PORT, RANK and WORLD_SIZE itself, and under torchrun it reuses the
            # agent's store (TORCHELASTIC_USE_AGENT_STORE) instead of opening a second one on its port.
            init_method = "env://"
        else:
            init_method = f"tcp://{info.master_addr}:{info.master_port or _free_port()}"
        dist.init_process_group(
            chosen,
            init_method=init_method,
            rank=info.rank,
            world_size=info.world_size,
            timeout=timedelta(seconds=timeout_seconds),
        )
    # A torchjob replica's ranks are adjacent by its process count, as its members and spares place them
    # (local_ranks.place_in); under other launchers, by LOCAL_WORLD_SIZE.
    per_replica = local_ranks.processes_per_replica() if info.launcher == "torchjob" else info.local_world_size
    return DistContext(
        info.rank, info.local_rank, info.world_size, device, chosen, info.launcher, local_world_size=per_replica
    )


class BackendUnavailable(ValueError):
    """The process-group backend asked for is not built into this torch."""


def available_backends() -> list[str]:
    """The torch.distributed backends this torch was built with (PyPI wheels: gloo, nccl; never mpi)."""
    checks = {"gloo": dist.is_gloo_available, "nccl": dist.is_nccl_available, "mpi": dist.is_mpi_available}
    checks["ucc"] = getattr(dist, "is_ucc_available", lambda: False)
    return [name for name, check in checks.items() if check()]


def _require_backend(name: str) -> None:
    # Checked before init_process_group, whose own error for a missing backend is a deep C++ message.
    backends = available_backends()
    wanted = [part.split(":")[-1].strip().lower() for part in name.split(",")]  # e.g. "cpu:gloo,cuda:nccl"
    if any(w not in backends for w in wanted):
        raise BackendUnavailable(
            f"torch.distributed backend {name!r} is not available in this torch ({torch.__version__}); it has "
            f"{', '.join(backends) or 'none'}. Use one of those (e.g. --backend gloo), or a torch built with {name}"
        )


def _record_uncaught_exceptions() -> None:
    """Write an uncaught exception to ``TORCHELASTIC_ERROR_FILE`` (torchelastic's format, as ``@record``
    does), so the controller can put the exception in the job's status even if the output is lost."""
    if not os.environ.get("TORCHELASTIC_ERROR_FILE") or getattr(sys.excepthook, "torchjob", False):
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        with contextlib.suppress(OSError, ValueError, TypeError):
            ErrorHandler().record_exception(value)
        previous(kind, value, tb)

    hook.torchjob = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def shutdown(exit_code: int | None = None) -> None:
    """Leave the process group cleanly; with ``exit_code``, also end the process right there.

    Every rank first waits at a barrier for the others. Without it, a rank that finishes first closes its
    connections while a peer is still tearing down, and gloo in that peer can abort the process (SIGABRT,
    "terminate called without an active exception") after all its work is done. Even after the barrier
    the teardown itself, or C++ destructors at interpreter exit, can still rarely abort; the last call of a
    script should therefore be ``shutdown(exit_code=0)``. That skips the teardown and exits at once (like
    ``os._exit``, after flushing stdout and stderr), so save and close what you keep before it.
    """
    if dist.is_initialized():
        with contextlib.suppress(RuntimeError):  # a peer already gone: nothing left to wait for
            dist.barrier()
        if exit_code is None:
            dist.destroy_process_group()
    if exit_code is not None:
        code = local_ranks.finish(exit_code)  # a replica's first process ends after its others
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
