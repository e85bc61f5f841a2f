"""A replica of several processes whose first process raises in the first attempt, right after the replica's other
processes started (train/local_ranks.py) and before the group forms: they must end with it, at once, and the
group restart must follow (they would otherwise wait for the group's timeout)."""

import os

import torchjob.train as tt
from torchjob.train import local_ranks

local_ranks.start()
first_attempt = os.environ["TORCHJOB_ATTEMPT"] == "0"
if first_attempt and os.environ["TORCHJOB_REPLICA"] == "master-0" and os.environ["LOCAL_RANK"] == "0":
    raise RuntimeError("the first process fails")
ctx = tt.init(timeout_seconds=600)
ctx.log(f"formed a group of {ctx.world_size}")
tt.shutdown(exit_code=0)
