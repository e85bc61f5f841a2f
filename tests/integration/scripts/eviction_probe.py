"""An EvictionHold in a process whose main thread sits in a long call (as in a collective), for
tests/integration/test_eviction_hold.py. ``MODE``: plain (nobody hands over), handover (a newer membership is
published 0.3 s after the notice), own (the script handles SIGTERM itself), repairing (the notice comes while
the member repairs)."""

import os
import signal
import sys
import threading
import time

from torchjob.train.eviction import EvictionHold

mode = sys.argv[1]
if mode == "own":
    signal.signal(signal.SIGTERM, lambda *_: os._exit(7))
newest = [0]


def noted() -> None:
    print("noted", flush=True)
    if mode == "handover":
        threading.Timer(0.3, lambda: newest.__setitem__(0, 1)).start()


hold = EvictionHold(0, lambda: 0, lambda: newest[0], noted)
if mode == "repairing":
    hold.repairing(True)
print(f"active {hold.active}", flush=True)
time.sleep(8)
print("trained on", flush=True)
sys.exit(0)
