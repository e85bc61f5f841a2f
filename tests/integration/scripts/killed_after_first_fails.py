"""A replica of two processes whose first process fails with a lost peer's error (an echo) a moment before its
second process is SIGKILLed, in the first attempt: the replica must end as the killed process's (code 137),
not as the echo, and the group restart must follow."""

import os
import signal
import time
from pathlib import Path

import torchjob.train as tt
from torchjob.train import local_ranks

local_ranks.start()
echo = Path(os.environ["ECHO_MARKER"])
if os.environ["TORCHJOB_ATTEMPT"] == "0" and os.environ["TORCHJOB_REPLICA"] == "worker-0":
    if os.environ["LOCAL_RANK"] == "0":
        echo.touch()
        raise RuntimeError("Connection reset by peer (the echo of its second process's death)")
    while not echo.exists():
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)
ctx = tt.init(timeout_seconds=600)
ctx.log(f"formed a group of {ctx.world_size}")
tt.shutdown(exit_code=0)
