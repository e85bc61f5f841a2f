"""torchjob's own test servers (etcd for torchrun's etcd rendezvous, an S3 server): where their binaries are
built (``tools/*-build.sh``, versions pinned in ``tools/versions.env``), and free ports for them."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

from kuberig import ports
from tests.support.paths import TOOLS


def free_port() -> int:
    """A TCP port free on loopback right now, where no outbound connection takes it first (kuberig's rule)."""
    return ports.free_port("127.0.0.1")


def versions() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (TOOLS / "versions.env").read_text().split() if "=" in line)
    return dict(pairs)


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchjob"
    return Path(os.environ.get("TORCHJOB_CACHE") or default)


def etcd_binary() -> Path:
    return cache_dir() / "etcd" / f"etcd-{versions()['ETCD_V2_VERSION']}" / "bin" / "etcd"


def helm_binary() -> Path:
    return cache_dir() / "helm" / f"helm-{versions()['HELM_VERSION']}" / "bin" / "helm"


def versitygw() -> Path:
    return cache_dir() / "s3" / f"versitygw-{versions()['VERSITYGW_VERSION']}" / "bin" / "versitygw"


def build(script: str) -> str | None:
    """Run ``tools/SCRIPT`` (a no-op when the server is built); the tail of its errors if it failed."""
    result = subprocess.run(["bash", str(TOOLS / script)], capture_output=True, text=True)
    return None if result.returncode == 0 else result.stderr[-3000:]


def etcd_v2_keys(client: str) -> list[str]:
    """Every key etcd's v2 store holds, recursively."""
    tree = json.loads(urllib.request.urlopen(client + "/v2/keys/?recursive=true", timeout=5).read())
    keys: list[str] = []
    todo = [tree["node"]]
    while todo:
        node = todo.pop()
        keys.append(node.get("key", "/"))
        todo += node.get("nodes", [])
    return keys
