"""From a replica of a job to the process that runs it locally: argv, environment, working directory.

Pure (no I/O): the same inputs give the same ProcessSpec, so ``torchjob run --dry-run`` prints exactly what
would run, and tests can check it without starting anything.

Local meaning of the pod template: only the ``pytorch`` container runs; its ``command`` + ``args`` (with
Kubernetes' ``$(VAR)`` expansion), ``env`` values and ``workingDir`` apply. A relative ``workingDir``, and
the default working directory, are the job file's folder. ``python`` means the interpreter torchjob runs in.
Fields that only mean something on a cluster (image, resources, volumes...) are reported as ignored.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torchjob
from torchjob import worker_files
from torchjob.api import extensions
from torchjob.api.types import DEFAULT_CONTAINER_NAME, PyTorchJob, ReplicaType
from torchjob.core.envs import (
    ENV_THREADS,
    Addressing,
    holds_a_place,
    in_place,
    processes_per_replica,
    replica_env,
    threads_per_process,
)
from torchjob.core.replicas import ReplicaId, replica_slots, total_replicas

ENV_OUTPUT_DIR = worker_files.ENV_OUTPUT_DIR
# torchelastic's error-file protocol: a script decorated with @record (or using torchjob.train) writes its
# exception there, and the controller puts it in the job's condition.
ENV_ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
# The folder whose sitecustomize.py starts torchjob.autoreport in a replica's Python processes.
AUTOREPORT_BOOT = str(Path(torchjob.__file__).parent / "_boot")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_CLUSTER_ONLY_POD_FIELDS = (
    "volumes",
    "nodeSelector",
    "affinity",
    "tolerations",
    "serviceAccountName",
    "imagePullSecrets",
    "initContainers",
    "priorityClassName",
    "schedulerName",
    "hostNetwork",
    "securityContext",
)
_CLUSTER_ONLY_CONTAINER_FIELDS = (
    "image",
    "imagePullPolicy",
    "resources",
    "volumeMounts",
    "securityContext",
    "livenessProbe",
    "readinessProbe",
    "ports",
)


# Where an etcd rendezvous looks when the job names no host or port: an etcd on this machine.
DEFAULT_ETCD_PORT = 2379
# Local rendezvous settings, used where the job's rdzvConf sets none. Every member runs on this machine,
# so a lost one is noticed in seconds (keep-alive every 3 s, 2 misses) and, once the minimum has joined, a
# round closes 2 s after the last join instead of torchrun's 30. Not more often: every keep-alive rewrites
# the rendezvous state, and a late agent joins by compare-and-set on that state, one try per pass of its
# own loop (slow on a loaded machine: torch names each op from inspect.stack()). With two members beating
# every second it lost every try and never joined (a round of 2 trained on without it).
LOCAL_RDZV_CONF = (("last_call_timeout", "2"), ("keep_alive_interval", "3"), ("keep_alive_max_attempt", "2"))


@dataclass(frozen=True)
class ProcessSpec:
    """Everything needed to start one replica process."""

    replica: str
    argv: list[str]
    env: dict[str, str]  # set over the caller's environment
    cwd: str


def local_addressing(
    job: PyTorchJob, host: str, master_port: int, rdzv_port: int, rdzv_id: str, at_store: bool
) -> Addressing:
    """Where one attempt's group meets on this machine.

    ``at_store`` (the planner's decision, ``CreateReplica.rendezvous_at_store``): the c10d rendezvous meets
    at the store the backend hosts, on ``rdzv_port`` (no agent is its host, so any can be lost). Otherwise an
    elastic job meets at its ``rdzvHost:rdzvPort`` (by default an etcd on this machine).
    """
    elastic = job.spec.elastic_policy
    conf: tuple[tuple[str, str], ...] = ()
    rdzv_host = host
    backend = None
    if elastic is not None:
        conf = LOCAL_RDZV_CONF
        if at_store:
            conf = (("is_host", "false"), *conf)
            backend = "c10d"  # torchjob's store, also where the job's etcd is out of reach (elastic.etcd_stand_in)
        else:
            rdzv_host = elastic.rdzv_host or host
            rdzv_port = elastic.rdzv_port or DEFAULT_ETCD_PORT
    return Addressing(host, master_port, rdzv_host, rdzv_port, rdzv_id, rdzv_conf_defaults=conf, rdzv_backend=backend)


def local_command(job: PyTorchJob, container: dict[str, Any]) -> list[str]:
    """What a container runs here: its ``command``, or where it gives none (its image's entrypoint would run on a
    cluster) the job's ``torchjob.io/entrypoint``."""
    entrypoint = job.annotation(extensions.ENTRYPOINT)
    return list(container.get("command") or (shlex.split(entrypoint) if entrypoint else []))


def pytorch_container(job: PyTorchJob, replica_type: ReplicaType) -> dict[str, Any]:
    template = job.spec.pytorch_replica_specs[replica_type].template
    containers = template.get("spec", {}).get("containers") or []
    return next(c for c in containers if isinstance(c, dict) and c.get("name") == DEFAULT_CONTAINER_NAME)


# More local processes than this is almost surely a typo (`replicas: 1000000`); --max-processes raises it.
DEFAULT_MAX_PROCESSES = 64


def local_processes(job: PyTorchJob) -> int:
    """How many training processes a local run may start at once: replicas (an elastic job's maximum)
    times processes per replica."""
    return sum(replica_slots(job).values()) * processes_per_replica(job)


def local_problems(job: PyTorchJob, max_processes: int = DEFAULT_MAX_PROCESSES) -> list[str]:
    """What stops a valid job from running locally, one line each with the field to fix."""
    problems = []
    count = local_processes(job)
    if count > max_processes:
        problems.append(
            f"spec: a local run would start {count} processes (replicas × nprocPerNode), more than the "
            f"{max_processes} allowed on this machine; lower the counts, or allow them with --max-processes {count}"
        )
    for rtype in job.spec.pytorch_replica_specs:
        container = pytorch_container(job, rtype)
        if not local_command(job, container):
            problems.append(
                f"spec.pytorchReplicaSpecs.{rtype.value}.template.spec.containers[{DEFAULT_CONTAINER_NAME}]"
                ".command: required to run locally (there is no image to take an entrypoint from); "
                f"add e.g. command: [python, train.py], or name the image's entrypoint in {extensions.ENTRYPOINT}"
            )
    return problems


def elastic_launch_problem(job: PyTorchJob) -> str | None:
    """A warning when an elastic job's command does not start torchrun: nothing would read PET_* then."""
    if job.spec.elastic_policy is None or in_place(job):
        return None  # under in-place repair the script itself forms the group (torchjob.train.in_place)
    for rtype in job.spec.pytorch_replica_specs:
        container = pytorch_container(job, rtype)
        argv = " ".join([*local_command(job, container), *container.get("args", [])])
        if "torchrun" not in argv and "torch.distributed.run" not in argv:
            return (
                f"spec.pytorchReplicaSpecs.{rtype.value}.template.spec.containers[{DEFAULT_CONTAINER_NAME}].command: "
                "an elastic job's replicas are torchrun agents, but this command does not start torchrun, so "
                "nothing reads the PET_* rendezvous variables; use e.g. command: [torchrun, train.py]"
            )
    return None


def ignored_fields(job: PyTorchJob) -> list[str]:
    """Fields of the job that have no local meaning, e.g. ``image``, ``resources``, ``volumes``."""
    found: set[str] = set()
    for replica in job.spec.pytorch_replica_specs.values():
        pod = replica.template.get("spec", {})
        found.update(f for f in _CLUSTER_ONLY_POD_FIELDS if pod.get(f))
        for container in pod.get("containers") or []:
            if not isinstance(container, dict):
                continue
            if container.get("name") != DEFAULT_CONTAINER_NAME:
                found.add(f"container {container.get('name')!r}")
                continue
            # The default port is added by defaulting; only a user's own extra ports are worth a note.
            fields = [f for f in _CLUSTER_ONLY_CONTAINER_FIELDS if container.get(f) and f != "ports"]
            found.update(fields)
            if any("valueFrom" in e for e in container.get("env") or []):
                found.add("env valueFrom")
    if job.spec.run_policy.scheduling_policy is not None:
        found.add("schedulingPolicy")
    return sorted(found)


def process_spec(
    job: PyTorchJob,
    replica: ReplicaId,
    attempt: int,
    addressing: Addressing,
    job_file_dir: str,
    output_dir: str,
    python_dir: str,
    inherited_path: str,
    error_file: str | None = None,
    inherited_pythonpath: str = "",
) -> ProcessSpec:
    container = pytorch_container(job, replica.replica_type)
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if "value" in entry or "valueFrom" not in entry:
            env[entry["name"]] = _expand(entry.get("value") or "", env)  # null is "", as on Kubernetes
    # The contract comes after the user's env, so it wins, as on Kubernetes (Kubeflow appends it).
    env.update(replica_env(job, replica, attempt, addressing))
    env[ENV_OUTPUT_DIR] = output_dir
    if error_file:
        env[ENV_ERROR_FILE] = error_file
    env.setdefault(ENV_THREADS, threads_per_process(job, container))
    env[worker_files.ENV_MACHINE_PROCESSES] = str(machine_processes(job))
    env["PATH"] = python_dir + (":" + inherited_path if inherited_path else "")
    if job.annotation(extensions.AUTO_REPORT) != "false":
        # Scripts that never import torchjob report their steps and beat too (torchjob/autoreport.py).
        rest = env.get("PYTHONPATH", inherited_pythonpath)
        env["PYTHONPATH"] = AUTOREPORT_BOOT + (":" + rest if rest else "")
        env[worker_files.ENV_AUTOREPORT] = "1"
    argv = [_expand(a, env) for a in [*local_command(job, container), *container.get("args", [])]]
    working_dir = container.get("workingDir")
    cwd = str(Path(job_file_dir, working_dir)) if working_dir else job_file_dir
    return ProcessSpec(replica=str(replica), argv=argv, env=env, cwd=cwd)


def machine_processes(job: PyTorchJob) -> int:
    """How many of the group's processes this one machine may run at once (an elastic group's most): they share its
    GPUs, each by its rank (``torchjob.train.devices``), where on Kubernetes each Pod is given GPUs of its own."""
    elastic = job.spec.elastic_policy
    replicas = total_replicas(job)
    if elastic is not None and elastic.max_replicas:
        replicas = max(replicas, elastic.max_replicas)
    return replicas * processes_per_replica(job)


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined variables are replaced, ``$$`` escapes, others stay."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(replace, text)


# What tells a process which place in the group it has: a spare has none until the controller gives it one.


def spare_spec(job: PyTorchJob, name: str, replica_spec: ProcessSpec) -> ProcessSpec:
    """A warm spare: the same program, directory and environment as ``replica_spec`` (a replica of the
    group), but with no place in it; ``torchjob.train.init`` waits until the controller gives it one."""
    env = {k: v for k, v in replica_spec.env.items() if not holds_a_place(k)}
    env[worker_files.ENV_SPARE] = name
    return ProcessSpec(replica=name, argv=replica_spec.argv, env=env, cwd=replica_spec.cwd)
