"""Benchmark payload: the GPT example's model (``--size``) sharded with FSDP2 over this group, AdamW's state
filled by one step, then ``--trials`` rounds of a synchronous save and an asynchronous one
(``torchjob.train.sharded_checkpoint``) to a local folder, each timed on every rank: how long training is
blocked, and (async) how long until the save is committed. Rank 0 writes the slowest rank's times as JSON lines
to ``$BENCH_OUT/saves.jsonl``, and the state's size."""

import importlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from torchjob.train import init, shard_model, shutdown
from torchjob.train.sharded_checkpoint import ShardedCheckpointer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "gpt"))
example = importlib.import_module("model")  # the example's own model, as its script imports it
size, trials = sys.argv[1], int(sys.argv[2])
out = Path(os.environ["BENCH_OUT"])
ctx = init()
torch.manual_seed(0)
config = example.SIZES[size]
model = example.GPT(config)
model = shard_model(model, ctx, units=model.units())  # as the example shards it
optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
tokens, targets = example.Language(config).batch(1, 1, ctx.rank)
model(tokens, targets).backward()
optimizer.step()
local_bytes = sum(t.to_local().numel() * t.element_size() for t in model.parameters())  # type: ignore[attr-defined]
local_bytes *= 3  # the weights and AdamW's two moments
sync = ShardedCheckpointer(out / "sync", ctx, keep=1)
background = ShardedCheckpointer(out / "async", ctx, keep=1, async_save=True)


def slowest(seconds: float) -> float:
    value = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value)


total = torch.tensor([local_bytes], dtype=torch.float64)
dist.all_reduce(total)
for trial in range(1, trials + 1):
    dist.barrier()
    began = time.perf_counter()
    sync.save(trial, model, optimizer)
    sync_seconds = slowest(time.perf_counter() - began)
    dist.barrier()
    began = time.perf_counter()
    background.save(trial, model, optimizer)
    blocked = slowest(time.perf_counter() - began)
    background.wait()
    committed = slowest(time.perf_counter() - began)
    if ctx.is_main:
        record = {"sync": sync_seconds, "async blocked": blocked, "async committed": committed, "bytes": float(total)}
        with (out / "saves.jsonl").open("a") as found:
            found.write(json.dumps(record) + "\n")
shutdown(exit_code=0)
