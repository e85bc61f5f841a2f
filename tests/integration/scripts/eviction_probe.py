"""An EvictionHold in a process whose main thread sits in a long call (as in a collective), for
tests/integration/test_eviction_hold.py. ``MODE``: plain (nobody hands over), handover (a newer membership is
published 0.3 s after the notice), own (the script handles SIGTERM itself), repairing (the notice comes while
the member repairs); and with a controller that says when it looked at the notice (the operator), as a slow one
under load: late (it looks 7 s after the notice, and hands nothing over), late-handover (it publishes a newer
membership 6.5 s after the notice)."""

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
looked = [False]


def noted() -> None:
    print("noted", flush=True)
    if mode == "handover":
        threading.Timer(0.3, lambda: newest.__setitem__(0, 1)).start()
    if mode == "late":
        threading.Timer(7.0, lambda: looked.__setitem__(0, True)).start()
    if mode == "late-handover":
        threading.Timer(6.5, lambda: newest.__setitem__(0, 1)).start()


told = (lambda: looked[0]) if mode.startswith("late") else None
hold = EvictionHold(0, lambda: 0, lambda: newest[0], noted, told)
if mode == "repairing":
    hold.repairing(True)


def watch() -> None:  # what the membership watch does after each read
    while True:
        time.sleep(0.1)
        hold.after_read()


threading.Thread(target=watch, daemon=True).start()
print(f"active {hold.active}", flush=True)
started = time.monotonic()
time.sleep(9)
print("trained on", flush=True)
sys.exit(0)
