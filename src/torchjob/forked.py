"""What a process forked from one that imported torch does first, while it has one thread.

A forked child inherits PyTorch's intra-op thread pool without its threads. PyTorch replaces that pool on the
first call that reaches it (``caffe2::pthreadpool()``), and the replacement is not safe from two threads at once:
between dropping the old pool and storing the new one, another thread's call finds none, and the process aborts
("pool INTERNAL ASSERT FAILED ... Invalid thread pool!"). The autograd engine's threads reach it as they start
(``set_num_threads`` at thread start-up, once the parent set a thread count), so a forked replica's first
backward pass could abort it. Reaching the pool once, right after the fork, replaces it before any thread can.

Torch-free: it touches torch only where the process already imported it.
"""

from __future__ import annotations

import sys


def settle_threads(threads: int | None = None) -> None:
    """Replace the inherited thread pool now (``threads`` intra-op threads; the inherited count by default)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads if threads is not None else torch.get_num_threads())
