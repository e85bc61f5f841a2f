"""A replica that runs collectives without DDP, so its warm start need not wait for ``torch._dynamo``.

It records (to ``<output>/early-<replica>-<attempt>.json``) whether torch and torch._dynamo were imported before
it ran, and the sum of an all_reduce; with ``--fail-attempt A`` rank 1 exits 3 after the collective in attempt A.
"""

import json
import os
import sys

torch_was_loaded = "torch" in sys.modules
dynamo_was_loaded = "torch._dynamo" in sys.modules

import torch  # noqa: E402 - after the checks above, which are the point
import torch.distributed as dist  # noqa: E402


def main() -> None:
    args = sys.argv[1:]
    fail_attempt = args[args.index("--fail-attempt") + 1] if "--fail-attempt" in args else None
    out, attempt = os.environ["TORCHJOB_OUTPUT_DIR"], os.environ["TORCHJOB_ATTEMPT"]
    dist.init_process_group("gloo")
    value = torch.ones(1)
    dist.all_reduce(value)
    record = {"torch_was_loaded": torch_was_loaded, "dynamo_was_loaded": dynamo_was_loaded, "sum": value.item()}
    with open(os.path.join(out, f"early-{os.environ['TORCHJOB_REPLICA']}-{attempt}.json"), "w") as f:
        json.dump(record, f)
    if fail_attempt == attempt and dist.get_rank() == 1:
        sys.exit(3)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
