"""The cluster's image registry (the distribution registry, on the host's address on the nodes' network),
and the registry hosts whose images the nodes pull from it instead."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

# The registry hosts that nodes mirror to the cluster's registry (the common public ones), so a Pod keeps its
# image name (``docker.io/...``, ``ghcr.io/...``) and its pull policy. containerd 1.6 has no catch-all mirror.
MIRRORED_REGISTRIES = (
    "docker.io",
    "registry-1.docker.io",
    "registry.k8s.io",
    "k8s.gcr.io",
    "gcr.io",
    "ghcr.io",
    "quay.io",
    "nvcr.io",
    "public.ecr.aws",
    "mcr.microsoft.com",
    "k8scc01covidacr.azurecr.io",
)


def config(address: str, storage: Path) -> str:
    """The registry's configuration: serve ``address`` over plain HTTP (it is reached only from the nodes'
    own network), keep the images in ``storage``."""
    return json.dumps(
        {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(storage)}},
            "http": {"addr": address},
        }
    )


def serving_http(url: str) -> bool:
    """Whether ``url`` answers 200 (an OSError when nothing listens)."""
    with urllib.request.urlopen(url, timeout=2) as answer:
        return bool(answer.status == 200)


def serving(address: str) -> bool:
    return serving_http(f"http://{address}/v2/")
