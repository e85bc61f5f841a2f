"""The one contract between a training process (``torchjob.train``) and the controller that watches it.

The worker writes, the controller reads, and both name the files through this module, so they cannot
disagree. It imports neither torch nor the controller side: both sides can import it.

In the job's output folder (``TORCHJOB_OUTPUT_DIR``)::

    heartbeat/<process>.json    {"step": N, "time": when step N completed, "total_steps", "loss",
                                "samples_per_second", "seconds_per_step"}: the progress of one process (a
                                progress report; only step and time are required)
    preempted/<process>.json    {"time": when the process got an outside SIGTERM}: a preemption notice
    metrics/rank-<rank>.jsonl   one line per logged step (what `torchjob metrics` reads)
    inplace/<process>.json      {"attempt": A}: the process trains under torchjob.train's in-place repair, so
                                its group can replace a lost member without stopping it (a spare writes one
                                when it is warm and waiting)
    repairs.jsonl               one line per in-place repair, from rank 0: when the failure was seen, when the
                                next membership came, when rank 0 was re-formed, when every member was (the
                                group's first collective after it passed), the first step (bench/ reads it)
    membership.json             {"attempt": A, "generation": G, "members": [...], "joined": [...],
                                "spares": {spare: replica}}: the group as the controller last formed it
                                (written by the controller, read by the training processes)

On a cluster the same progress report also goes to the operator: ``torchjob.train`` POSTs it as JSON to
``TORCHJOB_REPORT_URL`` with the Pod's projected service-account token (audience ``REPORT_AUDIENCE``,
read from ``TORCHJOB_REPORT_TOKEN_FILE``) as a bearer token, so the operator knows which Pod sent it.

In-place repair on a cluster uses the same endpoint's siblings (``operator_endpoint``): a process
announces itself with ``POST .../announcements/<ns>/<job>`` and reads the group's membership with
``GET .../membership/<ns>/<job>`` (the same JSON as ``membership.json``), with the same token.

With in-place repair, a job's processes meet at a store torchjob hosts (``TORCHJOB_STORE``, host:port); each
generation of the group uses the store under its own prefix (``group_prefix``).

``<process>`` is ``<replica>-<local rank>`` (``worker-0-1``: the second process of replica worker-0, under
torchrun with ``nprocPerNode: 2``), so the controller finds every process of a replica by its name. Outside
torchjob (no ``TORCHJOB_REPLICA``) it is ``rank-<global rank>``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TypedDict

ENV_OUTPUT_DIR = "TORCHJOB_OUTPUT_DIR"
ENV_REPLICA = "TORCHJOB_REPLICA"
ENV_ATTEMPT = "TORCHJOB_ATTEMPT"
ENV_STORE = "TORCHJOB_STORE"
ENV_SPARE = "TORCHJOB_SPARE"
# How many processes a replica has (``nprocPerNode``), where it has several: its script, run directly rather than
# under torchrun, starts the others itself (``torchjob.train.local_ranks``). A spare keeps it: it is no place.
ENV_REPLICA_PROCESSES = "TORCHJOB_REPLICA_PROCESSES"
# Set for the members of an elastic group under in-place repair: they look for a new membership at each step.
ENV_ELASTIC = "TORCHJOB_ELASTIC"
# How long the survivors of a lost member wait for their new membership (a spare in its place) before they give up
# and the group restarts: set by torchjob for a group that repairs in place, as long as the job waits for a spare
# (``torchjob.io/spare-wait-seconds``) and REPAIR_MARGIN more, DEFAULT_REPAIR_TIMEOUT at least.
ENV_REPAIR_TIMEOUT = "TORCHJOB_REPAIR_TIMEOUT"
DEFAULT_REPAIR_TIMEOUT = 60.0
REPAIR_MARGIN = 15.0
ENV_REPORT_URL = "TORCHJOB_REPORT_URL"
ENV_REPORT_TOKEN_FILE = "TORCHJOB_REPORT_TOKEN_FILE"
# The CA (PEM) an https report URL is verified with, and the only one: the operator's own (controller/report_tls.py).
ENV_REPORT_CA = "TORCHJOB_REPORT_CA"
# Set by torchjob where a replica's scripts report through ``torchjob.autoreport`` without importing torchjob.
ENV_AUTOREPORT = "TORCHJOB_AUTOREPORT"
# Set where one machine runs the whole group (torchjob's local backend): how many of its processes share this
# machine's GPUs, each by its global rank (torchjob.train.devices).
ENV_MACHINE_PROCESSES = "TORCHJOB_MACHINE_PROCESSES"
REPORT_AUDIENCE = "torchjob.io/reports"
# The keys of a progress report (a heartbeat file's content, or the body POSTed to the operator).
REPORT_STEP = "step"
REPORT_TIME = "time"
REPORT_TOTAL_STEPS = "total_steps"
REPORT_LOSS = "loss"
REPORT_SAMPLES_PER_SECOND = "samples_per_second"
REPORT_SECONDS_PER_STEP = "seconds_per_step"
# When the process last proved it is alive (its reporting thread ran), whether or not the step moved: of a
# hung group, the one rank that stopped beating is the one the others wait for.
REPORT_ALIVE = "alive"
# True in a process's last report, sent as it exits on its own: its silence from then on is explained.
REPORT_EXITING = "exiting"
# For how many seconds the process's reporting thread has beaten without a stall (``torchjob/beats.py``): from
# when it has been a witness to another process's silence.
REPORT_BEATING_FOR = "beating_for"
# What hang detection learns its deadlines from (core/policies/learned.py): the longest wall time between two
# consecutive optimizer steps this process has seen (time in named phases left out), and how many such gaps
# it has seen; the phase it is in now ({"name", "elapsed"}), and the longest of each phase ({name: seconds}).
REPORT_LONGEST_GAP = "longest_step_gap"
REPORT_GAPS_SEEN = "step_gaps_seen"
REPORT_SECTION = "section"
REPORT_SECTIONS_LONGEST = "sections_longest"
# Which process of its Pod sent a report (a worker its launcher started again is another one), and the key of
# the operator's answer that orders it out of its group (``core.actions.LeaveGroup``), with the reason.
REPORT_PROCESS = "process"
ANSWER_LEAVE = "leave"
# How a process ordered out of its group ends: as if told to stop (128 + SIGTERM), which its launcher restarts.
LEAVE_EXIT_CODE = 143
HEARTBEAT_DIR = "heartbeat"
INPLACE_DIR = "inplace"
# The keys of an in-place announcement (a file locally, the body POSTed to the operator in a Pod): the attempt,
# when it was sent (locally), how often the member sends one (its own beat), and the generation whose step it has
# waited on past its allowance, when it does (a peer it needs is silent).
ANNOUNCE_ATTEMPT = "attempt"
ANNOUNCE_TIME = "time"
ANNOUNCE_EVERY = "every"
ANNOUNCE_WAITING = "waiting"
ANNOUNCE_LONGEST_GAP = "longest_gap"  # the longest time between two of its announcements so far, by its clock
ANNOUNCE_STEADY_FOR = "steady_for"  # seconds since its announcements last stalled (torchjob/beats.py)
# True once the member has trained a step in the group as it now is: past joining it, or re-forming it, whose
# silences say nothing about a hang (a spare just promoted under load was once silent 1.5 s).
ANNOUNCE_SETTLED = "settled"
# A member on notice of eviction says so (True); the operator's answer says once a pass has looked at it.
ANNOUNCE_NOTICE = "notice"
NOTICE_CONSIDERED = "noticeConsidered"
# A Pod's launcher (torchjob.launch) to the operator: its trainer's attempt, and how it ended once it has.
TRAINER_ATTEMPT = "attempt"
TRAINER_EXIT_CODE = "exit_code"
# The modules a Pod's launcher imports besides torch's (``torchjob.io/warm-preload``).
ENV_WARM_PRELOAD = "TORCHJOB_WARM_PRELOAD"
MEMBERSHIP_FILE = "membership.json"
REPAIRS_FILE = "repairs.jsonl"
PREEMPTED_DIR = "preempted"
METRICS_DIR = "metrics"


def process_key(replica: str | None, local_rank: int, rank: int) -> str:
    """How one training process names its files."""
    return f"{replica}-{local_rank}" if replica else f"rank-{rank}"


def heartbeat_file(output_dir: str | Path, key: str) -> Path:
    return Path(output_dir) / HEARTBEAT_DIR / f"{key}.json"


def preemption_file(output_dir: str | Path, key: str) -> Path:
    return Path(output_dir) / PREEMPTED_DIR / f"{key}.json"


def tensorboard_dir(output_dir: str | Path) -> Path:
    """Where torchjob.train writes TensorBoard event files: ``tensorboard --logdir`` this folder."""
    return Path(output_dir) / "tensorboard"


def tensorboard_run_dir(output_dir: str | Path, attempt: int, rank: int) -> Path:
    return tensorboard_dir(output_dir) / f"attempt-{attempt}" / f"rank-{rank}"


def metrics_file(output_dir: str | Path, rank: int) -> Path:
    return Path(output_dir) / METRICS_DIR / f"rank-{rank}.jsonl"


def replica_files(folder: Path, replica: str) -> list[Path]:
    """The files of every process of ``replica`` in ``folder`` (``worker-1-0.json``, ``worker-1-1.json``;
    never ``worker-10-0.json``)."""
    pattern = re.compile(rf"^{re.escape(replica)}-\d+\.json$")
    return sorted(p for p in folder.glob(f"{replica}-*.json") if pattern.match(p.name))


def inplace_file(output_dir: str | Path, key: str) -> Path:
    return Path(output_dir) / INPLACE_DIR / f"{key}.json"


def membership_file(output_dir: str | Path) -> Path:
    return Path(output_dir) / MEMBERSHIP_FILE


def group_prefix(attempt: int, generation: int) -> str:
    """The store prefix of one generation of one attempt's group: never reused (a reused prefix hangs)."""
    return f"torchjob/{attempt}/{generation}/"


def repairs_file(output_dir: str | Path) -> Path:
    return Path(output_dir) / REPAIRS_FILE


def report_url(operator_url: str, namespace: str, job: str) -> str:
    """``TORCHJOB_REPORT_URL`` for a job's Pods: where, under ``operator_url``, they report its progress."""
    return f"{operator_url.rstrip('/')}/reports/{namespace}/{job}"


def attempt() -> int:
    """This process's attempt: torchjob's, or under plain torchrun its agent's restart count, so that the metrics
    and TensorBoard runs of a script restarted by ``torchrun --max-restarts`` keep its attempts apart too."""
    found = os.environ.get(ENV_ATTEMPT) or os.environ.get("TORCHELASTIC_RESTART_COUNT") or "0"
    return int(found) if found.isdigit() else 0


def output_dir() -> str:
    """The job's output folder as a training process sees it (``TORCHJOB_OUTPUT_DIR``, else ``output``)."""
    return os.environ.get(ENV_OUTPUT_DIR) or "output"


def operator_endpoint(report_url: str, kind: str) -> str:
    """The operator's endpoint ``kind`` (``membership``, ``announcements``) for the job ``report_url`` (a
    ``.../reports/<namespace>/<job>`` URL, as the operator hands it to Pods) reports to."""
    base, found, job = report_url.rpartition("/reports/")
    if not found:
        raise ValueError(f"{ENV_REPORT_URL} is not an operator's report URL: {report_url!r}")
    return f"{base}/{kind}/{job}"


class Membership(TypedDict):
    """The membership of a group under in-place repair, as ``membership.json`` and the operator's ``/membership``
    spell it: the one definition both sides read and write (``api.types.GroupMembership.to_json`` makes one)."""

    attempt: int
    generation: int
    members: list[str]  # replica names, in rank order
    joined: list[str]  # the replicas that joined in this generation
    spares: dict[str, str]  # every spare promoted into the attempt's group → the replica it became
    # The newest generation published because members were removed without agreeing to it (lost, hung, scaled
    # away): a member whose step waits far too long leaves it only for such a one. A generation made by
    # agreement (a handover, a spare joining an elastic group) is taken at the next step; its members still
    # answer, however slow the step in progress.
    lost_in: int


class RestartOrder(TypedDict):
    """The operator's answer to a Pod's launcher when the group restarts, in two steps. First ``start`` false:
    stop what is left of the trainer within ``grace`` seconds (0: at once), and wait. Then, once no trainer of
    the old attempt is left anywhere in the group, ``start`` true: run ``attempt`` with ``env`` set (the contract
    variables of that attempt)."""

    attempt: int
    env: dict[str, str]
    grace: float
    start: bool


def parse_restart_order(found: object) -> RestartOrder | None:
    """A well-formed restart order from decoded JSON, or None (no order, or not one)."""
    if not isinstance(found, dict):
        return None
    attempt, env, grace, start = found.get("attempt"), found.get("env"), found.get("grace"), found.get("start")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0 or not isinstance(env, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()) or not isinstance(start, bool):
        return None
    if not isinstance(grace, int | float) or isinstance(grace, bool) or not 0 <= grace <= 3600:
        return None
    return RestartOrder(attempt=attempt, env=env, grace=float(grace), start=start)


def parse_membership(found: object) -> Membership | None:
    """A well-formed membership from decoded JSON, or None (nothing published yet, or not one)."""
    if not isinstance(found, dict):
        return None
    attempt, generation, members = found.get("attempt"), found.get("generation"), found.get("members")
    joined, spares = found.get("joined", []), found.get("spares", {})
    if not (isinstance(attempt, int) and isinstance(generation, int) and isinstance(members, list)):
        return None
    lost_in = found.get("lost_in", generation)  # a controller that does not say: every change may be a loss
    if not (isinstance(joined, list) and isinstance(spares, dict) and isinstance(lost_in, int)):
        return None
    return Membership(
        attempt=attempt,
        generation=generation,
        members=[str(m) for m in members],
        joined=[str(j) for j in joined],
        spares={str(k): str(v) for k, v in spares.items()},
        lost_in=lost_in,
    )


def repair_timeout() -> float:
    """The survivors' wait for a new membership: ``TORCHJOB_REPAIR_TIMEOUT`` where torchjob set it, else 60 s."""
    try:
        seconds = float(os.environ.get(ENV_REPAIR_TIMEOUT, ""))
    except ValueError:
        return DEFAULT_REPAIR_TIMEOUT
    return seconds if 0 < seconds < float("inf") else DEFAULT_REPAIR_TIMEOUT
