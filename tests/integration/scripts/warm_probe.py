"""A replica that records how it was started, to tell a warm start from a cold one and check that a warm one is
what ``python warm_probe.py ARGS`` would have been.

It records (to ``<output>/probe-<replica>-<attempt>.json``): whether torch and torch._dynamo were imported
before the script ran (only a warm start has them; a DDP script such as this one waits for torch._dynamo),
``__name__``, ``sys.argv``, ``sys.path[0]``, its command line as ``ps`` reads it, ``RANK`` as C code reads it
(getenv), torch's thread count, a random number, and where it resumed from. With ``--loader-workers K`` it sums a
dataset through a DataLoader with K worker processes; with ``--fail-attempt A`` it raises after saving its
checkpoint in attempt A, as rank 1.
"""

import ctypes
import gc
import json
import os
import random
import sys

torch_was_loaded = "torch" in sys.modules
dynamo_was_loaded = "torch._dynamo" in sys.modules

import torch  # noqa: E402 - after the check above, which is the point
import torch.distributed as dist  # noqa: E402


def main() -> None:
    args = sys.argv[1:]
    workers = int(args[args.index("--loader-workers") + 1]) if "--loader-workers" in args else 0
    fail_attempt = args[args.index("--fail-attempt") + 1] if "--fail-attempt" in args else None
    out, attempt = os.environ["TORCHJOB_OUTPUT_DIR"], os.environ["TORCHJOB_ATTEMPT"]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    checkpoint = os.path.join(out, f"checkpoint-rank{rank}.pt")
    resumed_from = torch.load(checkpoint)["step"] if os.path.exists(checkpoint) else 0
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(resumed_from + 1, resumed_from + 4):
        optimizer.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        torch.save({"step": step}, checkpoint)
    if fail_attempt == attempt and rank == 1:
        raise RuntimeError(f"boom in attempt {attempt} after step {step}")
    total = 0.0
    if workers:
        data = torch.utils.data.TensorDataset(torch.arange(64, dtype=torch.float32))
        loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=workers)
        total = float(sum(batch[0].sum() for batch in loader))
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = [a.decode() for a in f.read().split(b"\0") if a]
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    record = {
        "torch_was_loaded": torch_was_loaded,
        "dynamo_was_loaded": dynamo_was_loaded,
        "frozen_objects": gc.get_freeze_count(),
        "name": __name__,
        "argv": sys.argv,
        "path0": sys.path[0],
        "cmdline": cmdline,
        "c_rank": (libc.getenv(b"RANK") or b"").decode(),
        "threads": torch.get_num_threads(),
        "random": random.random(),
        "resumed_from": resumed_from,
        "loader_total": total,
    }
    with open(os.path.join(out, f"probe-{os.environ['TORCHJOB_REPLICA']}-{attempt}.json"), "w") as f:
        json.dump(record, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
