"""Saves a small checkpoint (step 1), then a huge one (step 2) so the test can kill it mid-write."""

import sys

import torch

from torchjob.train import Checkpointer, DistContext

ctx = DistContext(0, 0, 1, torch.device("cpu"), "gloo", "single")
ckpt = Checkpointer(sys.argv[1], ctx, keep=3)
ckpt.save({"weights": torch.ones(4)}, step=1)
print("step 1 saved", flush=True)
ckpt.save({"weights": torch.zeros(64 * 1024 * 1024)}, step=2)  # 256 MB
print("step 2 saved", flush=True)
