"""An elastic DDP training loop for the tests, launched by torchrun: it resumes from its checkpoint each time
the group re-forms (a member lost, added or removed), so the job's progress survives every change.

Each (re)start of a rank appends a line to ``rounds.jsonl`` in the job's output: the world size it joined,
its rank, the replica it runs in and the step it resumed from. Rank 0 writes ``result.json`` at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch import nn

import torchjob.train as tt


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-seconds", type=float, default=0.2)
    args = p.parse_args()

    ctx = tt.init()
    out = os.environ["TORCHJOB_OUTPUT_DIR"]
    torch.manual_seed(0)
    model = tt.wrap(nn.Linear(8, 1), ctx)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    checkpointer = tt.Checkpointer(os.path.join(out, "checkpoints"), ctx, every_steps=1)
    state = checkpointer.load()
    start = 0
    if state is not None:
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
    record = {
        "world": ctx.world_size,
        "rank": ctx.rank,
        "replica": os.environ.get("TORCHJOB_REPLICA"),
        "resumed_from": start,
        "time": time.time(),
    }
    with open(os.path.join(out, "rounds.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")

    for step in range(start + 1, args.steps + 1):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        checkpointer.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, step)
        time.sleep(args.step_seconds)

    if ctx.is_main:
        checkpointer.wait()
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump({"steps": args.steps, "world": ctx.world_size}, f)
    tt.shutdown(exit_code=0)


if __name__ == "__main__":
    main()
