"""Kubeflow Trainer's objects as Kubeflow ships them, for the tests that serve TrainJobs on a cluster."""

from __future__ import annotations

from typing import Any

# Kubeflow Trainer's manifests/base/runtimes/torch_distributed.yaml, as it ships (v2.3; the framework label is
# what Kubeflow's SDK reads a runtime's kind of trainer from).
TORCH_DISTRIBUTED: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "node",
                                                "image": "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
                                                "command": ["/bin/bash", "-c", "env | grep PET_\npip list\n"],
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
