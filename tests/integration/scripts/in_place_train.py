"""A tiny DDP job under torchjob.train's in-place repair: every step's samples depend on the step and the
group alone, and each rank records what it trained, so a test can check that a repair lost no sample and
trained none twice, and that every rank ends with the same model (its parameters, in final-<replica>.json).
It reports progress (MetricsLogger), so a hang can be detected and its silent rank named."""

import json
import os
import time

import torch
from torch import nn

import torchjob.train as tt
from torchjob.train.in_place import InPlaceTraining

STEPS = int(os.environ.get("STEPS", "60"))
GLOBAL_BATCH = 6  # divisible by 3 and 2: the same global batch whatever the group's size
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.1"))
# The step in which this member hears a notice of eviction runs this much longer, as on a loaded machine: the
# controller hands its place over while every member is still in that step.
SLOW_ON_NOTICE = float(os.environ.get("SLOW_ON_NOTICE", "0"))
slowed = False
# Once a test creates stick-<replica> in the output folder, that member's next step blocks in its own code (as in
# a hung read) after its collectives, and says so in stuck-<replica>: nothing from its group can end that step.

# Each forward, or backward, computes this long first (a sleep: no collective waited for in it, as in DDP's
# forward and backward), after saying so in forward-<replica> or backward-<replica>.
FORWARD_SECONDS = float(os.environ.get("FORWARD_SECONDS", "0"))
BACKWARD_SECONDS = float(os.environ.get("BACKWARD_SECONDS", "0"))


def long(what: str, seconds: float) -> None:
    open(os.path.join(output, f"{what}-{replica}"), "w").close()  # a spare is given its replica at init()
    time.sleep(seconds)


class LongForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        long("forward", FORWARD_SECONDS)
        return x


class LongBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        long("backward", BACKWARD_SECONDS)
        return grad


class Slowed(nn.Module):
    """A layer, then the slow part, then the layer the loss is of: the backward accumulates the last layer's
    gradients, sleeps, then the first layer's."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.last = nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = LongForward()(self.first(x)) if FORWARD_SECONDS else self.first(x)
        return self.last(LongBackward.apply(x) if BACKWARD_SECONDS else x)


# A spare whose cold-<replica> file a test wrote in the output folder (before the spare starts) warms that many
# seconds longer, as a spare Pod that takes long to start does.
spare = os.environ.get("TORCHJOB_SPARE")
cold = os.path.join(os.environ["TORCHJOB_OUTPUT_DIR"], f"cold-{spare}")
if spare and os.path.exists(cold):
    with open(cold) as seconds:
        time.sleep(float(seconds.read()))
ctx = tt.init()
torch.manual_seed(0)
model = Slowed() if FORWARD_SECONDS or BACKWARD_SECONDS else nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
trainer = InPlaceTraining(ctx, model, optimizer)
with open(os.path.join(os.environ["TORCHJOB_OUTPUT_DIR"], f"repair-timeout-{ctx.rank}"), "w") as waits:
    waits.write(f"{trainer.repair_timeout:g}")  # how long it would wait for a new membership
output = os.environ["TORCHJOB_OUTPUT_DIR"]
replica = os.environ["TORCHJOB_REPLICA"]
records = open(os.path.join(output, f"trained-{replica}.jsonl"), "a")  # noqa: SIM115
stuck_marker = os.path.join(output, f"stuck-{replica}")
metrics = tt.MetricsLogger(ctx, total_steps=STEPS)


def step(ddp: nn.Module, number: int, ctx: tt.DistContext) -> None:
    samples = [number * GLOBAL_BATCH + i for i in range(GLOBAL_BATCH) if i % ctx.world_size == ctx.rank]
    x = torch.stack([torch.full((8,), float(s % 5)) for s in samples])
    y = torch.tensor([[float(s % 3)] for s in samples])
    loss = ((ddp(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record = {"step": number, "samples": samples, "generation": ctx.generation, "time": time.time()}
    records.write(json.dumps(record) + "\n")
    records.flush()
    metrics.beat(number + 1, loss=loss.item())
    time.sleep(STEP_SECONDS)
    if os.path.exists(os.path.join(output, f"stick-{replica}")) and not os.path.exists(stuck_marker):
        open(stuck_marker, "w").close()
        time.sleep(3600)
    global slowed
    if SLOW_ON_NOTICE and not slowed and trainer.eviction is not None and trainer.eviction.noticed_at is not None:
        slowed = True
        time.sleep(SLOW_ON_NOTICE)


trainer.run(step, STEPS)
metrics.close()
parameters = [float(v) for p in model.parameters() for v in p.detach().double().flatten()]
ctx.log(f"done: {STEPS} steps, {trainer.repairs} repair(s)")
with open(os.path.join(output, f"final-{replica}.json"), "w") as f:
    json.dump({"parameters": parameters, "rank": trainer.ctx.rank, "repairs": trainer.repairs}, f)
tt.shutdown(exit_code=0)
