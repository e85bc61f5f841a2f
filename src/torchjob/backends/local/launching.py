"""What a local process of the job is started with: its ports (one pair per attempt, one for the job's
rendezvous store, kept in the job's state so a restarted controller reuses them), its addressing, and its
argv, environment and working directory (``mapping.process_spec``), as the planner's action decided."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from torchjob import worker_files
from torchjob.api.types import PyTorchJob
from torchjob.backends.local import mapping
from torchjob.backends.local.ports import LOCALHOST, free_port
from torchjob.backends.local.store import JobStore, LocalState
from torchjob.core.envs import ENV_THREADS, Addressing
from torchjob.core.replicas import ReplicaId

STORE_PORTS = "store"  # the key of the store's port in LocalState.ports (the others are attempts)


def error_file(log_path: Path) -> Path:
    """Where a replica's torchelastic error file goes: beside its log."""
    return log_path.with_suffix(".error.json")


class Launcher:
    """Process specs for one job's replicas, spares and store."""

    def __init__(self, store: JobStore, name: str, state: LocalState) -> None:
        self.store, self.name, self.state = store, name, state

    def ports(self, key: str) -> dict[str, int]:
        ports = self.state.ports.get(key)
        if ports is None:
            ports = {"master": free_port(), "rdzv": free_port()}
            self.state.ports[key] = ports
        return ports

    def store_port(self) -> int:
        return self.ports(STORE_PORTS)["rdzv"]

    def store_command(self) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of the job's rendezvous store process."""
        return [sys.executable, "-m", "torchjob.train.store_server", str(self.store_port())], {ENV_THREADS: "1"}

    def addressing(self, job: PyTorchJob, attempt: int, at_store: bool, meets_at_store: bool) -> Addressing:
        ports = self.ports(str(attempt))
        # The rendezvous store lives as long as the job, so every attempt meets at its port.
        rdzv_port = self.store_port() if at_store or meets_at_store else ports["rdzv"]
        rdzv_id = f"{self.name}-{attempt}"
        return mapping.local_addressing(job, LOCALHOST, ports["master"], rdzv_port, rdzv_id, at_store)

    def replica_spec(
        self, job: PyTorchJob, replica: ReplicaId, attempt: int, log_path: Path, where: Addressing, at_store: bool
    ) -> mapping.ProcessSpec:
        spec = mapping.process_spec(
            job,
            replica,
            attempt,
            where,
            job_file_dir=self.state.job_file_dir,
            output_dir=str(self.store.output_dir(self.name)),
            python_dir=str(Path(sys.executable).parent),
            inherited_path=os.environ.get("PATH", ""),
            error_file=str(error_file(log_path)),
            inherited_pythonpath=os.environ.get("PYTHONPATH", ""),
        )
        if at_store:
            # In-place repair: the group meets at the store torchjob hosts, which outlives every member.
            spec.env[worker_files.ENV_STORE] = f"{LOCALHOST}:{self.store_port()}"
        return spec
