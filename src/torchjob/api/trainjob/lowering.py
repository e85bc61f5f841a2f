"""A TrainJob and its runtime become the PyTorchJob the planner already drives: one planner for both APIs.

Kubeflow Trainer turns a TrainJob into a JobSet whose ``node`` job runs ``numNodes`` Pods, each with
``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` and ``PET_MASTER_PORT`` for
torchrun. A PyTorchJob with a Master and ``numNodes - 1`` Workers gets exactly those variables (node rank 0 is
the Master, Worker i is node i + 1), so the lowered job runs the same script the same way, and gains what
Trainer lacks: group restart with a backoff limit (the JobSet's ``failurePolicy.maxRestarts`` where the runtime
sets one, else the PyTorchJob default), hang detection, in-place repair (torchjob.io annotations on the
TrainJob), elastic groups from the runtime's ``torch.elasticPolicy``.

The Pod template is the runtime's ``node`` template with the TrainJob's trainer fields and runtime patches
applied as Trainer applies them; its trainer container (named ``node``) is renamed ``pytorch``, the name a
PyTorchJob's contract is bound to.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from torchjob.api.errors import ValidationError
from torchjob.api.quantities import cpu_cores
from torchjob.api.trainjob.types import MULTIKUEUE, NODE, ContainerPatch, PodSpecPatch, TrainingRuntime, TrainJob
from torchjob.api.types import API_VERSION, DEFAULT_CONTAINER_NAME, KIND

_INITIALIZERS = ("dataset-initializer", "model-initializer")


def lower(job: TrainJob, runtime: TrainingRuntime) -> tuple[dict[str, Any], list[str]]:
    """The PyTorchJob mapping that runs ``job`` as ``runtime`` describes, and notes for the user."""
    where = f"{runtime.kind} {runtime.name}"
    problems, notes = _unsupported(job, runtime, where)
    node_job = _node_job(runtime, where, problems)
    if problems:
        raise ValidationError(problems)
    template = copy.deepcopy(node_job["template"]["spec"]["template"])
    _apply_trainer(job, template)
    if not _container(template, NODE).get("image"):
        problems.append(f"spec.trainer.image: required, as {where} gives its {NODE} container no image")
    _apply_patches(job, template, problems)
    if problems:
        raise ValidationError(problems)
    _container(template, NODE)["name"] = DEFAULT_CONTAINER_NAME
    return _pytorchjob(job, runtime, template), notes


def _unsupported(job: TrainJob, runtime: TrainingRuntime, where: str) -> tuple[list[str], list[str]]:
    """What torchjob refuses (with the line each gets), and what it ignores (notes)."""
    problems, notes = [], []
    if job.spec.initializer:
        problems.append(
            "spec.initializer: dataset and model initializers are not run by torchjob; fetch the data in the "
            "trainer's script (or beforehand, to a volume) and drop spec.initializer"
        )
    policy = runtime.spec.ml_policy
    for other in ("mpi", "flux"):
        if policy is not None and getattr(policy, other) is not None:
            problems.append(f"{where}: spec.mlPolicy.{other}: only torch runtimes run under torchjob")
    elastic = policy.torch.elastic_policy if policy is not None and policy.torch is not None else None
    if elastic is not None and policy is not None and policy.num_nodes is not None:
        problems.append(f"{where}: spec.mlPolicy.numNodes: must not be set together with torch.elasticPolicy")
    if elastic is not None and elastic.metrics:
        notes.append(f"{where}: torch.elasticPolicy.metrics ignored (torchjob scale sets the size)")
    if runtime.spec.pod_group_policy:
        notes.append(f"{where}: spec.podGroupPolicy ignored (torchjob starts a group's Pods together itself)")
    return problems, notes


def _node_job(runtime: TrainingRuntime, where: str, problems: list[str]) -> dict[str, Any]:
    """The runtime's ``node`` replicated job, checked for the shape the lowering reads."""
    jobs = runtime.spec.template.spec.get("replicatedJobs")
    path = f"{where}: spec.template.spec.replicatedJobs"
    if not isinstance(jobs, list):
        problems.append(f"{path}: must be a list holding a job named {NODE}")
        return {}
    found: dict[str, Any] = {}
    for index, replicated in enumerate(jobs):
        name = replicated.get("name") if isinstance(replicated, dict) else None
        if name == NODE:
            found = replicated
        elif name in _INITIALIZERS:
            problems.append(f"{path}[{index}] ({name}): initializers are not run by torchjob; use a runtime without")
        else:
            problems.append(f"{path}[{index}] ({name!r}): only the job named {NODE} (the trainer) runs under torchjob")
    if not found:
        problems.append(f"{path}: no job named {NODE} (the trainer's)")
        return {}
    if found.get("replicas", 1) != 1:
        problems.append(f"{path}[{NODE}].replicas: must be 1 (numNodes sets how many Pods), got {found['replicas']!r}")
    pod = found.get("template", {}).get("spec", {}).get("template") if isinstance(found.get("template"), dict) else None
    containers = pod.get("spec", {}).get("containers") if isinstance(pod, dict) else None
    if not isinstance(containers, list) or not any(isinstance(c, dict) and c.get("name") == NODE for c in containers):
        problems.append(f"{path}[{NODE}].template.spec.template.spec.containers: must hold a container named {NODE}")
    return found


def _apply_trainer(job: TrainJob, template: dict[str, Any]) -> None:
    trainer = job.spec.trainer
    _add_metadata(template, job.spec.labels, job.spec.annotations)
    if trainer is None:
        return
    container = _container(template, NODE)
    if trainer.image is not None:
        container["image"] = trainer.image
    if trainer.command is not None:
        container["command"] = list(trainer.command)
        container.pop("args", None)  # the runtime's args belonged to its command
    if trainer.args is not None:
        container["args"] = list(trainer.args)
    if trainer.env:
        container["env"] = _merged(container.get("env"), trainer.env)
    if trainer.resources_per_node is not None:
        container["resources"] = copy.deepcopy(trainer.resources_per_node)


def _apply_patches(job: TrainJob, template: dict[str, Any], problems: list[str]) -> None:
    for number, patch in enumerate(job.spec.runtime_patches or []):
        spec_patch = patch.training_runtime_spec
        jobset = spec_patch.template if spec_patch is not None else None
        path = f"spec.runtimePatches[{number}].trainingRuntimeSpec.template.spec.replicatedJobs"
        for index, replicated in enumerate((jobset.spec.replicated_jobs or []) if jobset and jobset.spec else []):
            if replicated.name != NODE:
                problems.append(f"{path}[{index}].name: only {NODE} (the trainer) runs here, got {replicated.name!r}")
                continue
            pod = replicated.template.spec.template if replicated.template and replicated.template.spec else None
            if pod is None:
                continue
            if pod.metadata is not None:
                _add_metadata(template, pod.metadata.labels, pod.metadata.annotations)
            if pod.spec is not None:
                _patch_pod_spec(template["spec"], pod.spec, f"{path}[{index}].template.spec.template.spec", problems)


def _patch_pod_spec(spec: dict[str, Any], patch: PodSpecPatch, path: str, problems: list[str]) -> None:
    plain = patch.model_dump(by_alias=True, exclude_none=True, exclude={"containers", "init_containers", "volumes"})
    spec.update(copy.deepcopy(plain))
    if patch.volumes:
        spec["volumes"] = _merged(spec.get("volumes"), patch.volumes)
    for field, changes in (("containers", patch.containers), ("initContainers", patch.init_containers)):
        for index, change in enumerate(changes or []):
            _patch_container(spec, field, change, f"{path}.{field}[{index}]", problems)


def _patch_container(spec: dict[str, Any], field: str, change: ContainerPatch, path: str, problems: list[str]) -> None:
    target = next((c for c in spec.get(field) or [] if isinstance(c, dict) and c.get("name") == change.name), None)
    if target is None:
        problems.append(f"{path}.name: the runtime has no {field[:-1]} named {change.name!r}")
        return
    if change.env and change.name == NODE and field == "containers":
        problems.append(f"{path}.env: the trainer's environment is set with spec.trainer.env")
        return
    if change.env:
        target["env"] = _merged(target.get("env"), change.env)
    if change.volume_mounts:
        target["volumeMounts"] = _merged(target.get("volumeMounts"), change.volume_mounts)
    if change.security_context is not None:
        target["securityContext"] = copy.deepcopy(change.security_context)


def _pytorchjob(job: TrainJob, runtime: TrainingRuntime, template: dict[str, Any]) -> dict[str, Any]:
    policy = runtime.spec.ml_policy
    torch = policy.torch if policy is not None else None
    trainer = job.spec.trainer
    elastic = torch.elastic_policy if torch is not None else None
    nodes = (trainer.num_nodes if trainer else None) or (policy.num_nodes if policy else None) or 1
    asked = (trainer.num_proc_per_node if trainer else None) or (torch.num_proc_per_node if torch else None) or "auto"
    resources = _container(template, DEFAULT_CONTAINER_NAME).get("resources")
    procs = _counted(asked, resources) if asked in ("auto", "cpu") else asked
    run_policy: dict[str, Any] = {}
    restarts = (runtime.spec.template.spec.get("failurePolicy") or {}).get("maxRestarts")
    if isinstance(restarts, int) and not isinstance(restarts, bool):
        run_policy["backoffLimit"] = restarts
    if job.spec.suspend is not None:
        run_policy["suspend"] = job.spec.suspend
    if job.spec.active_deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = job.spec.active_deadline_seconds
    if job.spec.managed_by == MULTIKUEUE:
        run_policy["managedBy"] = MULTIKUEUE

    def replica(count: int) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": "OnFailure", "template": copy.deepcopy(template)}

    spec: dict[str, Any] = {"nprocPerNode": str(procs), "runPolicy": run_policy}
    if elastic is not None:
        lowest = elastic.min_nodes or elastic.max_nodes or nodes
        highest = elastic.max_nodes or max(lowest, nodes)
        spec["pytorchReplicaSpecs"] = {
            "Worker": replica(trainer.num_nodes if trainer and trainer.num_nodes else highest)
        }
        spec["elasticPolicy"] = {"minReplicas": lowest, "maxReplicas": highest, "rdzvBackend": "c10d"}
        if elastic.max_restarts is not None:
            spec["elasticPolicy"]["maxRestarts"] = elastic.max_restarts
    else:
        spec["pytorchReplicaSpecs"] = {"Master": replica(1), **({"Worker": replica(nodes - 1)} if nodes > 1 else {})}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": _metadata(job), "spec": spec}


def _metadata(job: TrainJob) -> dict[str, Any]:
    """The TrainJob's name, namespace, labels and annotations (not what the API server or kubectl keep there)."""
    found: dict[str, Any] = {"name": job.metadata.name}
    if job.metadata.namespace:
        found["namespace"] = job.metadata.namespace
    if job.metadata.labels:
        found["labels"] = dict(job.metadata.labels)
    annotations = {
        k: v for k, v in (job.metadata.annotations or {}).items() if not k.startswith("kubectl.kubernetes.io/")
    }
    if annotations:
        found["annotations"] = annotations
    return found


def _counted(word: object, resources: Any) -> int | str:
    """``auto`` and ``cpu`` as a count, as Trainer counts them: a GPU limit's count for ``auto``; else the CPU
    limit, whole and at least 1, or 1 without one (torchrun's own ``auto`` would start a process per core the
    machine has, whatever the Pod was given)."""
    limits = resources.get("limits") if isinstance(resources, dict) else None
    limits = limits if isinstance(limits, dict) else {}
    gpus = limits.get("nvidia.com/gpu")
    if word == "auto" and gpus is not None:
        return str(gpus)
    return max(1, math.ceil(cpu_cores(limits.get("cpu")) or 1))


def _add_metadata(template: dict[str, Any], labels: dict[str, str] | None, annotations: dict[str, str] | None) -> None:
    for key, extra in (("labels", labels), ("annotations", annotations)):
        if extra:
            metadata = template.setdefault("metadata", {})
            metadata[key] = {**(metadata.get(key) or {}), **extra}


def _container(template: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in template["spec"]["containers"] if c.get("name") == name)
    return found


def _merged(base: Any, extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kubernetes' list-map merge by ``name``: an entry of ``extra`` replaces the one of the same name."""
    kept = [dict(item) for item in base or [] if isinstance(item, dict)]
    names = {item.get("name") for item in extra}
    return [item for item in kept if item.get("name") not in names] + [copy.deepcopy(item) for item in extra]
