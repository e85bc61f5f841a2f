"""Which launcher started this process, and where it says the group meets. Pure: reads a mapping, no I/O.

Recognised, in this order:
- **torchrun** (torch.distributed.elastic): ``TORCHELASTIC_RUN_ID`` or ``GROUP_RANK`` with ``LOCAL_RANK``;
  it sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT for each worker.
- **torchjob / Kubeflow PyTorchJob**: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, one process per replica
  (``TORCHJOB_REPLICA`` tells torchjob from Kubeflow, for the log line only).
- **Kubernetes Indexed Job**: ``JOB_COMPLETION_INDEX`` is the rank; WORLD_SIZE and MASTER_ADDR (the
  headless-service name of index 0) must be set in the pod template.
- **nothing**: a single process, rank 0 of 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_MASTER_PORT = 29500


class LaunchEnvError(ValueError):
    """The launch environment is inconsistent; the message names the variable and what is expected."""


@dataclass(frozen=True)
class LaunchInfo:
    launcher: str  # torchrun | torchjob | kubeflow | indexed-job | single
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def _int(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None:
        raise LaunchEnvError(f"{name} is not set")
    try:
        value = int(raw)
    except ValueError:
        raise LaunchEnvError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise LaunchEnvError(f"{name} must be at least {minimum}, got {value}")
    return value


def detect_launch(env: Mapping[str, str]) -> LaunchInfo:
    if "TORCHELASTIC_RUN_ID" in env or ("GROUP_RANK" in env and "LOCAL_RANK" in env):
        launcher = "torchrun"
        local_rank = _int(env, "LOCAL_RANK")
        local_world = _int(env, "LOCAL_WORLD_SIZE", 1) if "LOCAL_WORLD_SIZE" in env else 1
    elif "JOB_COMPLETION_INDEX" in env and "RANK" not in env:
        launcher = "indexed-job"
        if "WORLD_SIZE" not in env:
            raise LaunchEnvError(
                "WORLD_SIZE is not set: an Indexed Job must set it to its completions in the pod template"
            )
        info = _checked("indexed-job", _int(env, "JOB_COMPLETION_INDEX"), _int(env, "WORLD_SIZE", 1), 0, 1, env)
        return info
    elif "RANK" in env or "WORLD_SIZE" in env:
        launcher = "torchjob" if "TORCHJOB_REPLICA" in env else "kubeflow"
        # LOCAL_RANK where the replica's script started its other processes itself (local_ranks.py)
        local_rank = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
        local_world = _int(env, "LOCAL_WORLD_SIZE", 1) if "LOCAL_WORLD_SIZE" in env else 1
    else:
        return LaunchInfo("single", 0, 1, 0, 1, "127.0.0.1", _port(env) if "MASTER_PORT" in env else 0)
    return _checked(launcher, _int(env, "RANK"), _int(env, "WORLD_SIZE", 1), local_rank, local_world, env)


def _checked(
    launcher: str, rank: int, world: int, local_rank: int, local_world: int, env: Mapping[str, str]
) -> LaunchInfo:
    if rank >= world:
        raise LaunchEnvError(f"RANK ({rank}) must be less than WORLD_SIZE ({world})")
    if local_rank >= local_world and launcher == "torchrun":
        raise LaunchEnvError(f"LOCAL_RANK ({local_rank}) must be less than LOCAL_WORLD_SIZE ({local_world})")
    addr = env.get("MASTER_ADDR", "")
    if world > 1 and not addr:
        raise LaunchEnvError(f"MASTER_ADDR is not set, but WORLD_SIZE is {world}: every rank must know where rank 0 is")
    port = _port(env) if "MASTER_PORT" in env else DEFAULT_MASTER_PORT
    return LaunchInfo(launcher, rank, world, local_rank, local_world, addr or "127.0.0.1", port)


def _port(env: Mapping[str, str]) -> int:
    port = _int(env, "MASTER_PORT", 1)
    if port > 65535:
        raise LaunchEnvError(f"MASTER_PORT must be a TCP port (1-65535), got {port}")
    return port
