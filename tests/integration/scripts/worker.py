"""A configurable replica for the integration tests.

It records its environment and pid to the job's output folder, optionally joins a real torch.distributed
(gloo) group and all-reduces, then does what ``--act`` says when it is the named replica in the named attempt:
``exit:N``, ``signal:N``, ``raise:MESSAGE``, ``hang``. ``--spawn-child`` starts a grandchild process, to prove
that stopping a replica stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--act", default="", help="REPLICA:ATTEMPT:ACTION[:ARG], ATTEMPT may be '*'")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to run before finishing")
    p.add_argument("--spawn-child", action="store_true")
    args = p.parse_args()

    replica, attempt = os.environ["TORCHJOB_REPLICA"], os.environ["TORCHJOB_ATTEMPT"]
    out = os.environ["TORCHJOB_OUTPUT_DIR"]
    record = {k: v for k, v in os.environ.items() if k in CONTRACT or k.startswith("PET_")}
    record["pid"] = str(os.getpid())
    if args.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        record["child_pid"] = str(child.pid)
    # Written whole or not at all: the tests read it while the replica runs.
    partial = os.path.join(out, f".{replica}-{attempt}.partial")
    with open(partial, "w") as f:
        json.dump(record, f)
    os.replace(partial, os.path.join(out, f"{replica}-{attempt}.json"))
    print(f"{replica} attempt {attempt} started, pid {os.getpid()}", flush=True)

    if args.ddp:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        value = torch.ones(1)
        dist.all_reduce(value)
        print(
            f"{replica}: all_reduce gave {int(value.item())} across world size {dist.get_world_size()}",
            flush=True,
        )

    target, _, rest = args.act.partition(":")
    when, _, action = rest.partition(":")
    if target == replica and when in (attempt, "*"):
        kind, _, arg = action.partition(":")
        print(f"{replica}: doing {action}", flush=True)
        if kind == "exit":
            # os._exit: leaving a live gloo group through interpreter shutdown can abort (SIGABRT) in C++.
            os._exit(int(arg))
        if kind == "signal":
            os.kill(os.getpid(), int(arg))
        if kind == "raise":
            raise ValueError(arg)
        if kind == "hang":
            time.sleep(3600)

    time.sleep(args.sleep)
    if args.ddp:
        dist.barrier()
        dist.destroy_process_group()
    print(f"{replica}: done", flush=True)


CONTRACT = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PYTHONUNBUFFERED", "OMP_NUM_THREADS"}

if __name__ == "__main__":
    main()
