"""The CustomResourceDefinitions torchjob installs: ``pytorchjobs.kubeflow.org`` when Kubeflow's is absent, and
``elasticjobs.elastic.pytorch.org`` for TorchElastic's ElasticJob (in place of its own controller's).

The schema is structural (every level has a type) so the API server prunes unknown fields and ``kubectl
explain`` works, but the pod templates are kept open (``x-kubernetes-preserve-unknown-fields``): a
PodTemplateSpec schema would be thousands of lines, and the API server validates the Pods themselves when
the operator creates them. Rules users get wrong most often are enforced at admission with CEL, so ``kubectl
apply`` rejects them with a clear message instead of a Failed job; the rest of Kubeflow's validation runs in
the operator and ends up in the job's Failed condition.

The status and scale subresources match Kubeflow's (``kubectl scale pytorchjob/NAME --replicas=N`` scales the
Workers), and ``kubectl get pytorchjobs`` shows State and Age like Kubeflow's CRD does. The ElasticJob's schema is
TorchElastic's (Kubeflow's common RunPolicy inlined in its spec, Kubeflow's common JobStatus), with the columns its
CRD printed (Min, Max, Desired, rdzvEndpoint) and a scale subresource for its Workers.
"""

from __future__ import annotations

from typing import Any

from torchjob.api import extensions

GROUP = "kubeflow.org"
VERSION = "v1"
KIND = "PyTorchJob"
PLURAL = "pytorchjobs"
CRD_NAME = f"{PLURAL}.{GROUP}"

_OPEN_OBJECT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_TIME: dict[str, Any] = {"type": "string", "format": "date-time"}


def _replica_spec() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["template"],
        "properties": {
            "replicas": {"type": "integer", "format": "int32", "minimum": 0, "default": 1},
            "restartPolicy": {
                "type": "string",
                "enum": ["Always", "OnFailure", "Never", "ExitCode"],
                "default": "OnFailure",
            },
            "template": _OPEN_OBJECT,
        },
    }


def _run_policy_fields() -> dict[str, Any]:
    """Kubeflow's common RunPolicy: a PyTorchJob's ``runPolicy``, inlined in an ElasticJob's spec."""
    return {
        "cleanPodPolicy": {"type": "string", "enum": ["None", "Running", "All"], "default": "None"},
        "ttlSecondsAfterFinished": {"type": "integer", "format": "int32", "minimum": 0},
        "activeDeadlineSeconds": {"type": "integer", "format": "int64", "minimum": 1},
        "backoffLimit": {"type": "integer", "format": "int32", "minimum": 0},
        "schedulingPolicy": _OPEN_OBJECT,
        "suspend": {"type": "boolean", "default": False},
        "managedBy": {"type": "string"},
    }


def _run_policy() -> dict[str, Any]:
    # Kubeflow's defaults, stored in the object as its webhook stores them: Kubeflow's SDK cannot read a job
    # without a runPolicy (its model requires one), and `kubectl apply` of Kubeflow's examples gives none.
    return {
        "type": "object",
        "default": {},
        "x-kubernetes-validations": _RUN_POLICY_RULES,
        "properties": _run_policy_fields(),
    }


def _elastic_policy() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "minReplicas": {"type": "integer", "format": "int32", "minimum": 1},
            "maxReplicas": {"type": "integer", "format": "int32", "minimum": 1},
            "rdzvBackend": {"type": "string"},
            "rdzvPort": {"type": "integer", "format": "int32"},
            "rdzvHost": {"type": "string"},
            "rdzvId": {"type": "string"},
            "rdzvConf": {
                "type": "array",
                "items": {"type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "string"}}},
            },
            "standalone": {"type": "boolean"},
            "nProcPerNode": {"type": "integer", "format": "int32"},
            "maxRestarts": {"type": "integer", "format": "int32"},
            "metrics": {"type": "array", "items": _OPEN_OBJECT},
        },
    }


def _status() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string"},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastUpdateTime": _TIME,
            "lastTransitionTime": _TIME,
        },
    }
    replica_status = {
        "type": "object",
        "properties": {
            "active": {"type": "integer", "format": "int32"},
            "succeeded": {"type": "integer", "format": "int32"},
            "failed": {"type": "integer", "format": "int32"},
            "selector": {"type": "string"},
            "labelSelector": _OPEN_OBJECT,
        },
    }
    attempt = {
        "type": "object",
        "properties": {
            "attempt": {"type": "integer"},
            "startTime": _TIME,
            "endTime": _TIME,
            "outcome": {"type": "string"},
            "disrupted": {"type": "object", "additionalProperties": {"type": "string"}},
            "repairedTime": _TIME,
            "regroupedTime": _TIME,
            "spareAwaitedTime": _TIME,
        },
    }
    return {
        "type": "object",
        "properties": {
            "conditions": {"type": "array", "items": condition},
            "replicaStatuses": {"type": "object", "additionalProperties": replica_status},
            "startTime": _TIME,
            "completionTime": _TIME,
            "lastReconcileTime": _TIME,
            # torchjob's own: the group restart generation, the restarts counted against backoffLimit, history.
            "attempt": {"type": "integer"},
            "restartCount": {"type": "integer"},
            "attempts": {"type": "array", "items": attempt},
            # A crash loop's back-off: counted restarts in a row of early failures; when the next attempt may start.
            "crashLoopRestarts": {"type": "integer"},
            "nextAttemptTime": _TIME,
            # Elastic jobs: members lost, added or removed without a restart; when lost ones are replaced.
            "membershipChanges": {"type": "integer"},
            "replacementDue": {"type": "object", "additionalProperties": _TIME},
            # In-place repairs (a spare took a lost member's place) and the warm spares ready now.
            "repairs": {"type": "integer"},
            "sparesReady": {"type": "integer"},
            # The membership a group under in-place repair was last told (what its members read).
            "membership": {
                "type": "object",
                "properties": {
                    "attempt": {"type": "integer"},
                    "generation": {"type": "integer"},
                    "members": {"type": "array", "items": {"type": "string"}},
                    "joined": {"type": "array", "items": {"type": "string"}},
                    "spares": {"type": "object", "additionalProperties": {"type": "string"}},
                    # The newest generation made because members were lost (not by agreement).
                    "lostIn": {"type": "integer"},
                },
            },
            # Training progress in Kubeflow Trainer's shape (KEP-2779), from torchjob.train's reports.
            "trainerStatus": {
                "type": "object",
                "properties": {
                    "progressPercentage": {"type": "integer", "minimum": 0, "maximum": 100},
                    "estimatedRemainingSeconds": {"type": "integer", "minimum": 0},
                    "metrics": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "value"],
                            "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
                        },
                    },
                    "lastUpdatedTime": _TIME,
                },
            },
            # Hang deadlines learned from the job's own steps (core/policies/learned.py).
            "learnedDeadlines": {
                "type": "object",
                "properties": {
                    "progressSeconds": {"type": "integer", "minimum": 0},
                    "longestStepGapSeconds": {"type": "number", "minimum": 0},
                    "sectionSeconds": {"type": "object", "additionalProperties": {"type": "integer"}},
                },
            },
        },
    }


# Admission-time checks (CEL): the mistakes that should never get as far as a Pod, as Kubeflow's webhook refuses them.
_MANAGERS = ", ".join(f"'{m}'" for m in extensions.KUBEFLOW_MANAGERS)
_RUN_POLICY_RULES = [
    {
        "rule": f"!has(self.managedBy) || self.managedBy in [{_MANAGERS}] || "
        f"(self.managedBy.startsWith('{extensions.PREFIX}') && size(self.managedBy) > {len(extensions.PREFIX)})",
        "message": f"runPolicy.managedBy: must be {' or '.join(extensions.KUBEFLOW_MANAGERS)} "
        "(or a torchjob.io/ controller name)",
    },
    {
        "rule": "has(self.managedBy) == has(oldSelf.managedBy) && "
        "(!has(self.managedBy) || self.managedBy == oldSelf.managedBy)",
        "message": "runPolicy.managedBy: is immutable",
    },
]
_SPEC_RULES = [
    {
        "rule": "self.all(k, k in ['Master', 'Worker', 'master', 'worker'])",
        "message": "pytorchReplicaSpecs: only Master and Worker replicas are allowed",
    },
    {
        "rule": "!has(self.Master) || !has(self.Master.replicas) || self.Master.replicas == 1",
        "message": "pytorchReplicaSpecs.Master.replicas: must be exactly 1",
    },
    {
        "rule": "!(has(self.Master) && has(self.master)) && !(has(self.Worker) && has(self.worker))",
        "message": "pytorchReplicaSpecs: a replica type is named twice (the case does not count); keep one",
    },
]


def _crd(
    group: str,
    version: str,
    names: dict[str, Any],
    spec_schema: dict[str, Any],
    workers: str,
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    """A namespaced job CRD: the spec's schema, the status torchjob writes, the status subresource and a scale
    subresource over the Workers at ``workers`` (a JSON path), and the columns ``kubectl get`` prints."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names['plural']}.{group}", "labels": {"app.kubernetes.io/managed-by": "torchjob"}},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": names,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": _status(),
                            },
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": f"{workers}.replicas",
                            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
                            "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
                        },
                    },
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


_STATE = {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"}
_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def crd_manifest() -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "required": ["pytorchReplicaSpecs"],
        "properties": {
            "pytorchReplicaSpecs": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": _replica_spec(),
                "x-kubernetes-validations": _SPEC_RULES,
            },
            "runPolicy": _run_policy(),
            "elasticPolicy": _elastic_policy(),
            "nprocPerNode": {"type": "string"},
        },
    }
    names = {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": "pytorchjob"}
    progress = {"name": "Progress %", "type": "integer", "jsonPath": ".status.trainerStatus.progressPercentage"}
    return _crd(
        GROUP,
        VERSION,
        {**names, "categories": ["all", "kubeflow"]},
        spec_schema,
        ".spec.pytorchReplicaSpecs.Worker",
        [_STATE, progress, _AGE],
    )


ELASTIC_GROUP = "elastic.pytorch.org"
ELASTIC_VERSION = "v1alpha1"
ELASTIC_KIND = "ElasticJob"
ELASTIC_PLURAL = "elasticjobs"
_ELASTIC_RULES = [
    {"rule": "self.replicaSpecs.all(k, k == 'Worker')", "message": "replicaSpecs: an ElasticJob runs Workers only"},
    {
        "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
        "message": "minReplicas: must be at most maxReplicas",
    },
]


def elasticjob_crd_manifest() -> dict[str, Any]:
    """TorchElastic's ``elasticjobs.elastic.pytorch.org``, served by the torchjob operator."""
    spec_schema = {
        "type": "object",
        "required": ["rdzvEndpoint", "replicaSpecs"],
        "x-kubernetes-validations": _ELASTIC_RULES,
        "properties": {
            **_run_policy_fields(),
            "rdzvEndpoint": {"type": "string", "minLength": 1},
            "minReplicas": {"type": "integer", "format": "int32", "minimum": 1},
            "maxReplicas": {"type": "integer", "format": "int32", "minimum": 1},
            "replicaSpecs": {"type": "object", "minProperties": 1, "additionalProperties": _replica_spec()},
        },
    }
    workers = ".spec.replicaSpecs.Worker"
    names = {"kind": ELASTIC_KIND, "listKind": f"{ELASTIC_KIND}List", "plural": ELASTIC_PLURAL}
    columns = [
        {"name": "Min", "type": "integer", "jsonPath": ".spec.minReplicas"},
        {"name": "Max", "type": "integer", "jsonPath": ".spec.maxReplicas"},
        {"name": "Desired", "type": "integer", "jsonPath": f"{workers}.replicas"},
        {"name": "rdzvEndpoint", "type": "string", "jsonPath": ".spec.rdzvEndpoint"},
        _STATE,
        _AGE,
    ]
    return _crd(
        ELASTIC_GROUP,
        ELASTIC_VERSION,
        {**names, "singular": "elasticjob", "categories": ["all"]},
        spec_schema,
        workers,
        columns,
    )
