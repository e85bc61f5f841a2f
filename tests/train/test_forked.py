"""A process forked after ``import torch`` replaces PyTorch's inherited thread pool before any thread of its own
starts (``torchjob/forked.py``), keeping the thread count it was given or inherited, and trains."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import os, sys, threading
import torch
from torchjob import forked

torch.set_num_threads(2)
pid = os.fork()
if pid == 0:
    forked.settle_threads()
    inherited = torch.get_num_threads()
    forked.settle_threads(1)
    # The first backward passes of a forked process, from several threads at once.
    def step():
        x = torch.randn(64, 64, requires_grad=True)
        (x @ x).sum().backward()
        assert x.grad is not None
    threads = [threading.Thread(target=step) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(inherited, torch.get_num_threads(), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_process_settles_its_thread_pool_and_trains() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2", "1"], done.stdout
