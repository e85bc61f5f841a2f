"""torchjob's extensions of the PyTorchJob API, carried as annotations so Kubeflow tooling ignores them safely.

Kubeflow's CRD prunes unknown spec fields, so anything torchjob adds lives in ``metadata.annotations``:
the same file stays valid for Kubeflow's operator and keeps its meaning under torchjob.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

PREFIX = "torchjob.io/"

# Which replicas must succeed for the job to succeed. `Default` is Kubeflow's rule (the Master, or every
# Worker when there is no Master); `AllReplicas` waits for every replica (kubeflow/trainer #1982).
SUCCESS_POLICY = PREFIX + "success-policy"
SUCCESS_POLICIES = ("Default", "AllReplicas")

# Seconds to wait after SIGTERM before SIGKILL when stopping a replica.
TERMINATION_GRACE = PREFIX + "termination-grace-seconds"
DEFAULT_TERMINATION_GRACE = 10.0

# Seconds without progress (torchjob.train heartbeats) after which an attempt counts as hung and restarts;
# when not set, learned from the job's own step gaps (core/policies/learned.py).
PROGRESS_DEADLINE = PREFIX + "progress-deadline-seconds"

# Seconds an attempt may take to complete its first step (imports, a dataset download, a checkpoint load,
# torch.compile) before it counts as hung; the progress deadline applies only from the first step on.
STARTUP_DEADLINE = PREFIX + "startup-deadline-seconds"
DEFAULT_STARTUP_DEADLINE = 1800.0

# Seconds a process may stay in a named phase that is not a step (a checkpoint save or load, an evaluation:
# torchjob.sections) before it counts as hung; learned from the phase's own runs when not set.
SECTION_DEADLINE = PREFIX + "section-deadline-seconds"

# Seconds a running process may go without beating (its reporting thread, which a blocked collective does
# not stop) while the others of its group beat, before it is named as hung: a SIGSTOPped or frozen process, or
# one whose node vanished. Needs no tuning to the job's step time; "0" turns it off.
LIVENESS_DEADLINE = PREFIX + "liveness-deadline-seconds"
DEFAULT_LIVENESS_DEADLINE = 10.0

# "false" keeps torchjob's progress and liveness reports out of a local replica's Python processes (it puts
# a sitecustomize on their PYTHONPATH that hooks the optimizer's step; see torchjob/autoreport.py).
AUTO_REPORT = PREFIX + "auto-report"

# Local runs start replicas that are Python scripts from the job's warm interpreter (torch imported once, not
# per rank and restart); "false" starts every replica cold. WARM_PRELOAD adds modules (comma-separated) that
# the warm interpreter imports besides torch's own (backends/local/warm_client.py).
WARM_START = PREFIX + "warm-start"
WARM_PRELOAD = PREFIX + "warm-preload"

# The command a container that gives none runs where there is no image to take an entrypoint from (a local run),
# as a shell would split it: "python -m torch.distributed.run" for an image whose entrypoint is the elastic
# launcher (what an ElasticJob's images run). On a cluster the image's own entrypoint runs.
ENTRYPOINT = PREFIX + "entrypoint"

# Seconds before a lost Worker of an elastic job is replaced (it rejoins the running group then).
REPLACEMENT_DELAY = PREFIX + "replacement-delay-seconds"

# Warm spares kept beside a fixed group whose script trains with torchjob.train's in-place repair: a lost
# member is replaced by a spare while the survivors carry on (no group restart). 0 (the default) keeps none.
SPARES = PREFIX + "spares"
MAX_SPARES = 8

# Seconds a group that repairs in place waits for a spare to warm, where a member was lost while none was ready
# (a second loss before the next spare warmed, a spare Pod still starting), before it restarts instead: a local
# spare warms in seconds, a spare Pod in tens of them, one on a node still pulling its image in minutes. "0"
# restarts at once. The survivors wait for their new membership this long and 15 s more (torchjob.train).
SPARE_WAIT = PREFIX + "spare-wait-seconds"
DEFAULT_SPARE_WAIT = 45.0

# Who may run a job (spec.runPolicy.managedBy): Kubeflow's two values, as its webhook allows, plus torchjob's own
# controller names (``torchjob.io/...``: the torchjob operator, or one started with ``--managed-by``). Immutable.
KUBEFLOW_MANAGERS = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")
TORCHJOB_MANAGER = PREFIX + "operator"


def managed_by_problem(value: str | None) -> str | None:
    if value is None or value in KUBEFLOW_MANAGERS or (value.startswith(PREFIX) and len(value) > len(PREFIX)):
        return None
    return f"must be {' or '.join(KUBEFLOW_MANAGERS)} (or a torchjob.io/ controller name), got {value!r}"


# Seconds a crash-looping group waits before its next attempt, as the kubelet waits before restarting a container:
# the first restart of a streak at once, the next after RESTART_BACKOFF seconds, doubling up to
# RESTART_BACKOFF_MAX. An attempt that trained RESTART_BACKOFF_RESET seconds before it failed ends the streak;
# the platform's restarts (eviction, preemption, a lost node) never wait. "0" turns the back-off off.
RESTART_BACKOFF = PREFIX + "restart-backoff-seconds"
RESTART_BACKOFF_MAX = PREFIX + "restart-backoff-max-seconds"
DEFAULT_RESTART_BACKOFF = 10.0
DEFAULT_RESTART_BACKOFF_MAX = 300.0
RESTART_BACKOFF_RESET = 600.0

# Restarts allowed when spec.runPolicy.backoffLimit is unset. Kubeflow restarts forever then; a crash-looping
# script would hold its machines indefinitely, so torchjob follows batch/v1 Job's default instead.
DEFAULT_BACKOFF_LIMIT = 6


def _one_of(allowed: tuple[str, ...]) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}, got {value!r}"

    return check


# Seconds in an annotation: at most about 31 years, so that every time computed from one stays a valid date.
MAX_ANNOTATION_SECONDS = 1e9


def _non_negative_number(value: str) -> str | None:
    try:
        ok = 0 <= float(value) <= MAX_ANNOTATION_SECONDS  # also false for nan
    except ValueError:
        ok = False
    return None if ok else f"must be a number of seconds from 0 to {MAX_ANNOTATION_SECONDS:.0e}, got {value!r}"


def _module_names(value: str) -> str | None:
    names = [name.strip() for name in value.split(",")]
    bad = [name for name in names if not all(part.isidentifier() for part in name.split("."))]
    return None if not bad else f"must be Python module names separated by commas, got {bad[0]!r}"


def _command_line(value: str) -> str | None:
    try:
        words = shlex.split(value)
    except ValueError as err:
        return f"must be a command line, as a shell splits it ({err}), got {value!r}"
    return None if words else "must be a command line, e.g. 'python -m torch.distributed.run', got an empty one"


def _spare_count(value: str) -> str | None:
    ok = value.isdigit() and int(value) <= MAX_SPARES
    return None if ok else f"must be a whole number from 0 to {MAX_SPARES}, got {value!r}"


ANNOTATION_RULES: dict[str, Callable[[str], str | None]] = {
    SUCCESS_POLICY: _one_of(SUCCESS_POLICIES),
    TERMINATION_GRACE: _non_negative_number,
    PROGRESS_DEADLINE: _non_negative_number,
    STARTUP_DEADLINE: _non_negative_number,
    SECTION_DEADLINE: _non_negative_number,
    LIVENESS_DEADLINE: _non_negative_number,
    AUTO_REPORT: _one_of(("true", "false")),
    WARM_START: _one_of(("true", "false")),
    WARM_PRELOAD: _module_names,
    REPLACEMENT_DELAY: _non_negative_number,
    SPARES: _spare_count,
    SPARE_WAIT: _non_negative_number,
    ENTRYPOINT: _command_line,
    RESTART_BACKOFF: _non_negative_number,
    RESTART_BACKOFF_MAX: _non_negative_number,
}
