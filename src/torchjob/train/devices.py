"""Which device a rank trains on and which backend its group uses, decided alike by every rank. Pure.

A rank's accelerator is ``cuda:<slot % devices>``, where ``slot`` is its place among the processes that share
this machine's GPUs: ``LOCAL_RANK`` of ``LOCAL_WORLD_SIZE`` under torchrun or in a Pod (a Pod sees only its own
GPUs), the global rank where torchjob's local backend runs the whole group on one machine
(``TORCHJOB_MACHINE_PROCESSES``). NCCL refuses two ranks on one GPU, so where the processes outnumber the GPUs
the whole group takes gloo and keeps its tensors on the shared GPUs (gloo carries CUDA tensors through host
memory). The choice rests only on numbers every rank on the machine reads the same: a group never mixes
backends, which would leave it waiting forever at its first collective.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torchjob import worker_files
from torchjob.train.env import LaunchInfo

# NCCL for CUDA tensors and gloo beside it for the CPU tensors a library's own collectives use (a checkpoint's step
# compared across ranks, a checksum): NCCL alone refuses a CPU tensor.
WITH_NCCL = "cpu:gloo,cuda:nccl"


class GpuShareError(ValueError):
    """NCCL was asked for where more processes than GPUs share the machine."""


@dataclass(frozen=True)
class DevicePlan:
    backend: str  # as init_process_group takes it: WITH_NCCL, gloo, or the script's own
    cuda_index: int | None  # None: the CPU

    def describe(self) -> str:
        where = "cpu" if self.cuda_index is None else f"cuda:{self.cuda_index}"
        return f"{self.backend} on {where}"


def plan_device(info: LaunchInfo, gpus: int, env: Mapping[str, str], backend: str | None = None) -> DevicePlan:
    """The backend (``backend`` where the script names one) and the device for the rank ``info`` describes, on
    a machine with ``gpus`` CUDA devices visible to it."""
    if gpus == 0:
        return DevicePlan(backend or "gloo", None)
    sharing = env.get(worker_files.ENV_MACHINE_PROCESSES, "")
    if sharing.isdigit() and int(sharing) > 0:
        slot, processes = info.rank, int(sharing)
    else:
        slot, processes = info.local_rank, info.local_world_size
    if backend is None:
        return DevicePlan(WITH_NCCL if processes <= gpus else "gloo", slot % gpus)
    if "nccl" not in backend:
        return DevicePlan(backend, None)  # a backend named without NCCL: the CPU, as the script asked
    if processes > gpus:
        raise GpuShareError(
            f"backend {backend!r}: {processes} processes share this machine's {gpus} GPU(s) and NCCL takes a GPU "
            "a rank; leave the backend unset (gloo over the shared GPUs), or give each process a GPU of its own"
        )
    # A bare "nccl" gets gloo beside it too: the library's own collectives (SyncCheck, a checkpoint's step) use CPU
    # tensors, which NCCL alone refuses.
    return DevicePlan(WITH_NCCL if backend == "nccl" else backend, slot % gpus)
