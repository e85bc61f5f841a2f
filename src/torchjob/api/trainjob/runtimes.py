"""Which training runtime a TrainJob's ``runtimeRef`` names: one given beside it (in its own file, or with
``--runtime FILE``), else torchjob's built-in copy of Kubeflow Trainer's ``torch-distributed``.

The built-in copy is what Kubeflow ships (manifests/base/runtimes/torch_distributed.yaml): one ``node``
replicated job whose container prints its ``PET_*`` environment unless the TrainJob gives a command. Its image is
used on a cluster and ignored locally, as every image is.
"""

from __future__ import annotations

from typing import Any

from torchjob.api.errors import ValidationError
from torchjob.api.trainjob.types import (
    API_GROUP,
    API_VERSION,
    CLUSTER_RUNTIME_KIND,
    NODE,
    RUNTIME_KIND,
    RuntimeRef,
    TrainingRuntime,
)

TORCH_DISTRIBUTED = "torch-distributed"
_TORCH_DISTRIBUTED: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": CLUSTER_RUNTIME_KIND,
    "metadata": {"name": TORCH_DISTRIBUTED, "labels": {f"{API_GROUP}/framework": "torch"}},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": NODE,
                        "template": {
                            "metadata": {"labels": {f"{API_GROUP}/trainjob-ancestor-step": "trainer"}},
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": NODE,
                                                "image": "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
                                                "command": ["/bin/bash", "-c", "env | grep PET_"],
                                            }
                                        ]
                                    }
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}


def built_in() -> list[TrainingRuntime]:
    """The runtimes torchjob knows without being given them."""
    return [TrainingRuntime.model_validate(_TORCH_DISTRIBUTED)]


def resolve(ref: RuntimeRef, namespace: str, given: list[TrainingRuntime]) -> tuple[TrainingRuntime, str]:
    """The runtime ``ref`` names, and where it came from ("given" or "built in"); a TrainingRuntime must be in
    the TrainJob's namespace, as Trainer requires."""
    if ref.api_group not in (None, API_GROUP):
        raise ValidationError([f"spec.runtimeRef.apiGroup: must be {API_GROUP}, got {ref.api_group!r}"])
    kind = ref.kind or CLUSTER_RUNTIME_KIND
    for runtime in given:
        same_namespace = kind != RUNTIME_KIND or (runtime.metadata.namespace or namespace) == namespace
        if runtime.kind == kind and runtime.name == ref.name and same_namespace:
            return runtime, "given"
    for runtime in built_in():
        if runtime.kind == kind and runtime.name == ref.name:
            return runtime, "built in"
    known = sorted({f"{r.kind} {r.name}" for r in [*given, *built_in()]})
    raise ValidationError(
        [
            f"spec.runtimeRef: no {kind} named {ref.name!r}"
            + (f" in namespace {namespace}" if kind == RUNTIME_KIND else "")
            + f" (known: {', '.join(known)}); put it in the same file or give it with --runtime FILE"
        ]
    )
