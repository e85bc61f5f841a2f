"""torchjob.train: the worker side of distributed training — what every DDP script otherwise hand-writes.

- ``init`` joins the process group from whatever launched the script (torchjob, Kubeflow, torchrun, an
  Indexed Job, or nothing) and returns a ``DistContext``;
- ``BatchPlan`` and ``shard`` split data across ranks with a stated batch-size scaling;
- ``wrap`` puts the model in DDP, ``shard_model`` shards it (FSDP2, or HSDP with ``replicas``), ``build_sharded``
  does so without the whole model in any rank's memory, and ``SyncCheck`` proves ranks really hold the same
  parameters;
- ``Checkpointer`` saves and resumes (atomic, checksummed, keep-last-K, async, S3 via fsspec, SIGTERM);
- ``section("evaluation")`` marks a phase that is not a step (checkpoints mark theirs): hang detection gives it
  its own allowance;
- ``MetricsLogger`` writes per-rank JSONL metrics (and TensorBoard event files, ``tensorboard``) and the
  heartbeat the controller reads;
- ``inplace.InPlaceTraining`` keeps the survivors alive when a rank is lost: the group re-forms with a warm
  spare (or smaller, elastic) and carries on from the survivors' state;
- ``preemption.PreemptionWatch`` turns a platform's notice (SIGTERM, a Pod's eviction) into a checkpoint
  before the process goes.

It never imports the controller side; the controller side never imports it (or torch).
"""

from torchjob.sections import section
from torchjob.train.checkpoint import Checkpointer, CheckpointError
from torchjob.train.context import DistContext
from torchjob.train.ddp import OutOfSyncError, SyncCheck, wrap
from torchjob.train.env import LaunchEnvError, LaunchInfo, detect_launch
from torchjob.train.fsdp import ShardingError, build_sharded, shard_model
from torchjob.train.init import BackendUnavailable, available_backends, init, shutdown
from torchjob.train.metrics import MetricsLogger
from torchjob.train.sharding import BatchPlan, ResumableSampler, shard

__all__ = [
    "BackendUnavailable",
    "BatchPlan",
    "CheckpointError",
    "Checkpointer",
    "DistContext",
    "LaunchEnvError",
    "LaunchInfo",
    "MetricsLogger",
    "OutOfSyncError",
    "ResumableSampler",
    "ShardingError",
    "SyncCheck",
    "available_backends",
    "build_sharded",
    "detect_launch",
    "init",
    "section",
    "shard",
    "shard_model",
    "shutdown",
    "wrap",
]
