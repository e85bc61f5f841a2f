"""Preemption in a training process: note an outside SIGTERM, let every rank agree to stop, exit as preempted.

A SIGTERM that torchjob did not send (an eviction, a spot node's notice, a Pod's preemption) sets a flag and
writes a notice for the controller (``worker_files.preemption_file``): its peers may crash before this rank
has saved, and the notice dates the root cause. The training loop asks ``PreemptionWatch.any_rank``
after each step (a collective, so every rank stops at the same step), saves, and ``exit`` leaves with
143, which every restart policy retries. A rank that never gets there exits with 143 after the grace period.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from types import FrameType

import torch
import torch.distributed as dist

from torchjob import worker_files
from torchjob.train.context import DistContext

PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM: retryable under every restart policy, ExitCode included


class PreemptionWatch:
    def __init__(self, ctx: DistContext) -> None:
        self.ctx = ctx
        self.signalled = False
        self.signalled_ranks: list[int] = []

    def install(self, grace_seconds: float) -> None:
        """Handle SIGTERM from now on: note it, and exit with 143 after ``grace_seconds`` at the latest."""

        def on_sigterm(signum: int, _frame: FrameType | None) -> None:
            if not self.signalled:
                self.signalled = True
                record_notice(self.ctx.local_rank, self.ctx.rank)
                timer = threading.Timer(grace_seconds, os._exit, args=(PREEMPTED_EXIT_CODE,))
                timer.daemon = True
                timer.start()

        signal.signal(signal.SIGTERM, on_sigterm)

    def any_rank(self) -> bool:
        """Whether any rank has been told to stop (collective: call it on every rank after each step)."""
        flags = [torch.tensor([1 if self.signalled else 0])]
        if self.ctx.distributed:
            local, flags = flags[0], [torch.zeros(1, dtype=torch.long) for _ in range(self.ctx.world_size)]
            dist.all_gather(flags, local)
        self.signalled_ranks = [rank for rank, flag in enumerate(flags) if flag.item()]
        return bool(self.signalled_ranks)

    def exit(self, step: int) -> None:
        """Leave as preempted, once the final checkpoint of ``step`` is safely written."""
        if self.ctx.is_main:
            ranks = ", ".join(map(str, self.signalled_ranks)) or "?"
            print(f"Rank 0: preempted (SIGTERM to rank {ranks}); checkpoint of step {step} saved, exiting", flush=True)
        # Exit without interpreter shutdown: tearing down a gloo group (or its threads at exit) while peers
        # leave at the same moment can abort with SIGABRT, turning a clean preemption (143) into a crash.
        # Everything worth keeping is on disk: the checkpoint was waited for, metrics are line-buffered.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(PREEMPTED_EXIT_CODE)


def record_notice(local_rank: int, rank: int) -> None:
    """Tell the controller when a notice came (``worker_files.preemption_file``): peers may crash before this
    rank is done saving, and a member of an in-place group hands its place over on it."""
    output = os.environ.get(worker_files.ENV_OUTPUT_DIR)
    if not output:
        return
    key = worker_files.process_key(os.environ.get(worker_files.ENV_REPLICA), local_rank, rank)
    path = worker_files.preemption_file(output, key)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"time": time.time()}))
        os.replace(tmp, path)
