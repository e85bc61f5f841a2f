"""DDP on this rank's device: a few steps, the sync check, a checkpoint saved and loaded back onto the device,
and the training going on from it exactly as it went on before the load."""

import argparse

import torch
from torch import nn

from torchjob.train import Checkpointer, SyncCheck, init, shutdown, wrap
from torchjob.train.ddp import checksum

parser = argparse.ArgumentParser()
parser.add_argument("--ckpt", required=True)
args = parser.parse_args()

ctx = init()
print(f"RANK {ctx.rank} TRAINS WITH {ctx.backend} ON {ctx.device}", flush=True)
torch.manual_seed(0)
model = wrap(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)), ctx)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
sync = SyncCheck(model, ctx)
checkpoints = Checkpointer(args.ckpt, ctx, keep=2)


def step(number: int) -> None:
    generator = torch.Generator().manual_seed(number * 100 + ctx.rank)
    x, y = torch.randn(32, 16, generator=generator), torch.randn(32, 1, generator=generator)
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x.to(ctx.device)), y.to(ctx.device)).backward()
    optimizer.step()
    sync.after_step(number)


for number in range(1, 4):
    step(number)
assert next(model.parameters()).device == ctx.device
checkpoints.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, 3)
checkpoints.wait()
step(4)
went_on = checksum(model)
state = checkpoints.load(map_location=ctx.device)
assert state is not None and state["step"] == 3
model.load_state_dict(state["model"])
optimizer.load_state_dict(state["optimizer"])
assert next(iter(optimizer.state.values()))["exp_avg"].device == ctx.device
step(4)
resumed = checksum(model)
if ctx.is_main:
    print(f"WENT ON {went_on.tolist()} RESUMED {resumed.tolist()}", flush=True)
assert torch.equal(went_on, resumed), (went_on, resumed)
print(f"RANK {ctx.rank} RESUMED ON {ctx.device}", flush=True)
shutdown(exit_code=0)
