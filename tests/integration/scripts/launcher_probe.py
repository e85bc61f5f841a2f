"""Run by a Pod's launcher (torchjob.launch) in tests/integration/test_pod_launcher.py: says how it was started,
then does what PROBE_DO says for its attempt (TORCHJOB_ATTEMPT): ``kill`` (SIGKILL itself), ``fail`` (exit 3),
``raise`` (an uncaught RuntimeError), ``sleep`` (until stopped), ``workers`` (a DataLoader with two worker
processes, then exit 0)."""

import json
import os
import signal
import sys
import time

warm = "torch" in sys.modules  # imported before this script ran: it was forked from the launcher
dynamo = "torch._dynamo" in sys.modules  # imported by the launcher after its first fork (no DDP here)
with open("/proc/self/cmdline", "rb") as f:
    cmdline = f.read().rstrip(b"\0").split(b"\0")
attempt = os.environ.get("TORCHJOB_ATTEMPT", "")
said = {
    "attempt": attempt,
    "argv": sys.argv,
    "warm": warm,
    "dynamo": dynamo,
    "pid": os.getpid(),
    "cmdline": [a.decode() for a in cmdline],
    "user_site_ran_in": os.environ.get("PROBE_PTH_PID"),  # set by a .pth file of the user site, where one ran
}
print("PROBE " + json.dumps(said), flush=True)
what = json.loads(os.environ["PROBE_DO"]).get(attempt, "exit")
if what == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
elif what == "fail":
    sys.exit(3)
elif what == "raise":
    raise RuntimeError(f"the probe failed in attempt {attempt}")
elif what == "sleep":
    time.sleep(600)
elif what == "workers":
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=2)
    print("PROBE_SUM", int(sum(batch[0].sum().item() for batch in loader)), flush=True)
