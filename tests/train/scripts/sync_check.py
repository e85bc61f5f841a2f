"""Two ranks train one step on different data; with --no-wrap each trains its own model (the classic bug)."""

import argparse

import torch
from torch import nn

from torchjob.train import OutOfSyncError, SyncCheck, init, shutdown, wrap

parser = argparse.ArgumentParser()
parser.add_argument("--no-wrap", action="store_true")
args = parser.parse_args()

ctx = init()
torch.manual_seed(0)
model: nn.Module = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
if not args.no_wrap:
    model = wrap(model, ctx)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(100 + ctx.rank)  # each rank its own shard of data
x, y = torch.randn(8, 10), torch.randn(8, 1)
nn.functional.mse_loss(model(x), y).backward()
optimizer.step()
try:
    SyncCheck(model, ctx).after_step(1)
except OutOfSyncError as err:
    print(f"OUT OF SYNC: {err}", flush=True)
    shutdown(exit_code=3)
print(f"rank {ctx.rank}: in sync", flush=True)
shutdown(exit_code=0)
