"""A DDP loop that reports progress; on the first attempt one rank may hang (the others then wait forever)."""

import argparse
import os
import sys
import time

import torch
from torch import nn

from torchjob.train import MetricsLogger, init, section, shutdown, wrap

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--hang-rank", type=int, default=-1)
p.add_argument("--hang-step", type=int, default=5)
p.add_argument("--hide-and-raise", action="store_true", help="silence stderr, then raise")
p.add_argument("--first-attempt-steps", type=int, help="attempt 0 runs this many steps (time to stop it from outside)")
p.add_argument("--evaluate-at", type=int, default=0, help="after this step, every rank evaluates (0: never)")
p.add_argument("--evaluate-seconds", type=float, default=0.0, help="how long the evaluation takes")
p.add_argument("--log-every", type=int, default=0, help="print a line every N steps (0: never)")
args = p.parse_args()

ctx = init()
if args.hide_and_raise:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # the traceback reaches no log: only the error file has it
    raise ValueError("hidden from the logs")
attempt = int(os.environ["TORCHJOB_ATTEMPT"])
print(f"rank {ctx.rank}: attempt {attempt} started", flush=True)
model = wrap(nn.Linear(4, 1), ctx)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
steps = args.first_attempt_steps if attempt == 0 and args.first_attempt_steps else args.steps
metrics = MetricsLogger(ctx, heartbeat_seconds=0.2, total_steps=steps)
for step in range(1, steps + 1):
    started = time.perf_counter()
    optimizer.zero_grad()
    loss = model(torch.randn(2, 4)).pow(2).mean()
    loss.backward()
    optimizer.step()
    if attempt == 0 and ctx.rank == args.hang_rank and step == args.hang_step:
        # Stuck between collectives: the others complete this step and wait in the next all_reduce.
        print(f"rank {ctx.rank}: hanging after step {step - 1}", flush=True)
        time.sleep(3600)
    metrics.step(step, 1, loss.item(), 2, time.perf_counter() - started)
    if step == args.evaluate_at:
        with section("evaluation"):  # longer than the progress deadline: a phase with its own allowance
            time.sleep(args.evaluate_seconds)
    if args.log_every and step % args.log_every == 0:
        print(f"rank {ctx.rank}: step {step}/{steps} loss {loss.item():.4f}", flush=True)
    time.sleep(0.05)
print(f"rank {ctx.rank}: done", flush=True)
metrics.close()
shutdown(exit_code=0)
sys.exit(0)
