"""A process whose reporter was already beating keeps beating when its MetricsLogger takes over.

Loading a DCP checkpoint makes AdamW's state with one optimizer step, which ``torchjob.autoreport`` counts: from
then on it beats. The script's MetricsLogger stands it down; had the logger then waited for its own first step to
beat (a minute and more at 1B parameters), the rank that took over first was silent while its peers, still
loading, beat on, and hang detection named it hung (the 1b case of ``bench.state``, restart after restart).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

SCRIPT = """
import json, sys, time
from pathlib import Path

from torchjob import autoreport

autoreport.start()
import torch

parameter = torch.nn.Parameter(torch.zeros(1))
torch.optim.SGD([parameter], lr=0.1).step()  # as DCP's load does to make AdamW's state
heartbeat = Path(sys.argv[1])
deadline = time.time() + 20
while not heartbeat.exists() and time.time() < deadline:
    time.sleep(0.1)
before = json.loads(heartbeat.read_text())

from torchjob.train import DistContext, MetricsLogger

ctx = DistContext(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend="gloo", launcher="none")
logger = MetricsLogger(ctx, tensorboard=False)
taken_over = time.time()
time.sleep(3.5)  # the script's first step, still running
after = json.loads(heartbeat.read_text())
print(json.dumps({"before": before, "after": after, "taken_over": taken_over}))
"""


def test_the_logger_beats_on_from_the_reporters_last_report_until_its_own_first_step(tmp_path: Path) -> None:
    env = {"TORCHJOB_AUTOREPORT": "1", "TORCHJOB_REPLICA": "worker-0", "RANK": "1", "LOCAL_RANK": "0"}
    env |= {"TORCHJOB_OUTPUT_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(ROOT / "src")  # this checkout's torchjob, whichever one the environment installed
    heartbeat = tmp_path / "heartbeat" / "worker-0-0.json"
    ran = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(heartbeat)], env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    before, after = seen["before"], seen["after"]
    assert before["step"] == 1  # the reporter counted the optimizer's step, and beat
    # Written by the logger after it took over, with the reporter's step: no silence at the handover.
    assert after["alive"] > seen["taken_over"] + 1.5, (before, after)
    assert after["step"] == 1 and after["time"] == before["time"]
    # One steady run of beats across the handover, not a new one.
    assert after["beating_for"] > 3.0, after
