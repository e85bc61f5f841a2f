"""Benchmark payload: one torchft 0.2.0 replica group of one process, training the MNIST example's model (or, with
``MODEL=gpt-100m``, the GPT example's ~110M-parameter one: a whole copy per group) as torchft's own DDP example does (a
Manager asking the Lighthouse for a quorum every step, one all-reduce per gradient, the optimizer step committed only
where every participant agreed, a replacement healed from a live peer's state).

Every committed step appends ``{"step", "time", "participants", "quorum"}`` to ``$BENCH_OUT/replica-$REPLICA.jsonl``,
where the benchmark reads when the survivors and a replacement committed, and in which quorum (the Lighthouse numbers
each membership it forms; the Manager keeps the number privately in 0.2.0, the version this payload is pinned to).
Each heal (the state received from a peer, loaded) appends ``{"time"}`` to ``$BENCH_OUT/healed-$REPLICA.jsonl``.
Runs until ``$STEPS`` steps are committed or it is stopped. ``PureDistributedDataParallel`` rather than
``torchft.DistributedDataParallel``: 0.2.0's comm hook asserts when a peer dies on gloo and ends the survivors
(``../shared/notes/TORCHFT.md``).
"""

import importlib
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.distributed import TCPStore  # type: ignore[attr-defined]
from torchft import Manager, ProcessGroupGloo
from torchft.ddp import PureDistributedDataParallel
from torchft.optim import OptimizerWrapper

replica = int(os.environ["REPLICA"])
batch = int(os.environ["BATCH"])
steps = int(os.environ["STEPS"])
out = Path(os.environ["BENCH_OUT"]) / f"replica-{replica}.jsonl"
healed = Path(os.environ["BENCH_OUT"]) / f"healed-{replica}.jsonl"
chosen_model = os.environ.get("MODEL", "mnist")
torch.manual_seed(replica)
torch.set_num_threads(1)
generator = torch.Generator().manual_seed(replica)
examples = Path(__file__).resolve().parents[2] / "examples"

if chosen_model == "mnist":
    sys.path.insert(0, str(examples / "mnist"))
    example = importlib.import_module("model")  # the example's own model and data, as its scripts import them
    images, labels, _, _ = importlib.import_module("mnist_data").load()
    train = example.to_dataset(images, labels)
    model = example.Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_of_next_batch(ddp: torch.nn.Module) -> torch.Tensor:
        chosen = torch.randint(len(train), (batch,), generator=generator)
        return F.cross_entropy(ddp(train.tensors[0][chosen]), train.tensors[1][chosen])

else:  # gpt-<size>: the sharded example's model, whole in every group
    sys.path.insert(0, str(examples / "gpt"))
    gpt = importlib.import_module("model")
    config = gpt.SIZES[chosen_model.removeprefix("gpt-")]
    torch.manual_seed(0)  # every group starts from the same weights, as the sharded example's ranks do
    model = gpt.GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    language = gpt.Language(config)
    length = int(os.environ.get("LENGTH", "0")) or None  # tokens per sequence: the model's context if unset

    def loss_of_next_batch(ddp: torch.nn.Module) -> torch.Tensor:
        tokens, targets = language.batch(batch, manager.current_step() + 1, replica, length)
        loss: torch.Tensor = ddp(tokens, targets)
        return loss


def load_state(state: dict[str, Any]) -> None:
    """A heal: the state torchft received from a live peer, loaded. Its time is when this group holds the lost
    state again (``$BENCH_OUT/healed-$REPLICA.jsonl``)."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])
    with healed.open("a") as said:
        said.write(json.dumps({"time": time.time()}) + "\n")


# A replica group of one plain process: torchft's Manager joins a store as a client, so this process serves it.
store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
manager = Manager(
    pg=ProcessGroupGloo(timeout=timedelta(seconds=10)),
    load_state_dict=load_state,
    state_dict=lambda: {"model": model.state_dict(), "optim": optimizer.state_dict()},
    min_replica_size=1,
    replica_id=f"replica_{replica}",
    rank=0,
    world_size=1,
    store_addr="127.0.0.1",
    store_port=store.port,
    timeout=timedelta(seconds=10),
)
ddp = PureDistributedDataParallel(manager, model)
wrapped = OptimizerWrapper(manager, optimizer)
with out.open("a") as records:
    while manager.current_step() < steps:
        before = manager.current_step()
        wrapped.zero_grad()
        loss_of_next_batch(ddp).backward()  # type: ignore[no-untyped-call]
        wrapped.step()
        if manager.current_step() > before:
            record = {
                "step": manager.current_step(),
                "time": time.time(),
                "participants": manager.num_participants(),
                "quorum": getattr(manager, "_quorum_id", None),
            }
            records.write(json.dumps(record) + "\n")
            records.flush()
manager.shutdown(wait=False)
