"""Where the rig's binaries come from: the pinned versions, the cache they are built into, and the build.

Everything the rig runs is built from the Go module proxy (and Debian's packages) by the scripts beside this
module (``scripts/build-*.sh``), once per machine, into a cache outside any checkout.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent / "scripts"
# What `build` builds, in order: the node needs the control plane's Kubernetes module first.
BUILDS = ("build-kube.sh", "build-node.sh", "build-kubeflow-operator.sh", "build-kueue.sh")


def versions() -> dict[str, str]:
    """The pinned versions (``scripts/versions.env``), as the build scripts read them."""
    pairs = (line.split("=", 1) for line in (SCRIPTS / "versions.env").read_text().split() if "=" in line)
    return dict(pairs)


def cache_dir() -> Path:
    """The build cache: ``KUBERIG_CACHE``, else ``TORCHJOB_CACHE`` (shared with torchjob's own test servers),
    else ``~/.cache/torchjob``; the same rule as ``scripts/go-env.sh``."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchjob"
    return Path(os.environ.get("KUBERIG_CACHE") or os.environ.get("TORCHJOB_CACHE") or default)


def control_plane_bin() -> Path:
    v = versions()
    return cache_dir() / "kube" / f"{v['K8S_VERSION']}-kwok-{v['KWOK_VERSION']}" / "bin"


def node_build_dir() -> Path:
    return cache_dir() / "real-node" / versions()["K8S_VERSION"]


def node_bin() -> Path:
    return node_build_dir() / "bin"


def rootfs() -> Path:
    """The Debian root filesystem (with python3) that is the base layer of the images the rig builds."""
    return cache_dir() / "real-node" / f"rootfs-{versions()['DEBIAN_SUITE']}"


def gopath() -> Path:
    return Path(os.environ.get("GOPATH") or cache_dir() / "gopath")


def kubectl() -> Path:
    return control_plane_bin() / "kubectl"


def build(*scripts: str) -> None:
    """Run the build scripts (all of :data:`BUILDS` unless named); each rebuilds only what is missing.
    Raises with the build's own output when one fails."""
    for script in scripts or BUILDS:
        result = subprocess.run(["bash", str(SCRIPTS / script)], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{script} failed:\n{result.stderr[-4000:]}")


def missing_control_plane() -> list[str]:
    names = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl")
    return [b for b in names if not (control_plane_bin() / b).exists()]


def missing_node() -> list[str]:
    missing = [b for b in ("kubelet", "kube-proxy", "coredns", "pause", "registry") if not (node_bin() / b).exists()]
    return missing + ([] if (rootfs() / ".complete").exists() else ["rootfs"])
