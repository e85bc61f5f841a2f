"""The torchjob operator deployed inside a kuberig cluster the way a user deploys it: its image built from this
checkout (no torch in it), pushed to the cluster's registry, and ``deploy/`` applied with kustomize, the image set
through ``images:`` (``tools/kube-rig deploy-operator``, and the multi-node tests). The command also pushes the
image the examples name, so that ``torchjob submit examples/mnist/job.yaml`` runs on the rig as it is.

The image is the rig's Debian base (python3.11) plus one layer: torchjob's own dependencies (installed once per
machine by uv into a cache folder, keyed by their list, as manylinux wheels for that Python) and this checkout's
``src/torchjob``. ``deploy/operator.yaml`` then runs it as it ships: two replicas with leader election, its report
endpoint behind the Service, readiness and liveness probes, a read-only root filesystem.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

from kuberig import Cluster, toolchain
from kuberig.state import exists
from tests.support.images import EXAMPLE_MNIST, push_example_images
from tests.support.paths import DEPLOY, ROOT

# Where the image is pushed; deploy/operator.yaml names torchjob-operator:0.1.0 and kustomize's images: maps it.
IMAGE_NAME, IMAGE_TAG = "docker.io/torchjob/operator", "dev"
SITE = "/usr/local/lib/python3.11/dist-packages"  # on Debian python3's path
ENTRYPOINT = b"#!/usr/bin/python3\nfrom torchjob.cli.main import entry\nentry()\n"


def dependencies() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def site_packages() -> Path:
    """torchjob's dependencies for the image's Python, installed once per machine (and per list of them)."""
    wanted = dependencies()
    key = hashlib.sha256(json.dumps(wanted).encode()).hexdigest()[:16]
    target = toolchain.cache_dir() / "operator-image" / key
    target.parent.mkdir(parents=True, exist_ok=True)
    # Two test sessions at once (xdist workers, a benchmark beside the tests): one installs, the other waits.
    with open(target.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install(wanted, target)


def _install(wanted: list[str], target: Path) -> Path:
    if (target / ".complete").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    uv = shutil.which("uv") or str(toolchain.cache_dir() / "uv" / "bin" / "uv")
    argv = [uv, "pip", "install", "--quiet", "--target", str(target), "--python-version", "3.11"]
    argv += ["--python-platform", "x86_64-manylinux_2_28", "--only-binary", ":all:", *wanted]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"cannot install the operator image's dependencies:\n{result.stderr[-2000:]}")
    (target / ".complete").touch()
    return target


def push_operator_image(cluster: Cluster) -> tuple[str, str, int]:
    """Build and push the operator's image; its name, its digest and the size of its own layer (the base is
    shared)."""
    packages = site_packages()
    files: dict[str, Path | bytes] = {
        SITE: packages,
        f"{SITE}/torchjob": ROOT / "src" / "torchjob",
        "/usr/local/bin/torchjob": ENTRYPOINT,
    }
    image = f"{IMAGE_NAME}:{IMAGE_TAG}"
    digest = cluster.push_image(image, files, entrypoint=["/usr/bin/python3", "/usr/local/bin/torchjob"])
    size = sum(f.stat().st_size for f in packages.rglob("*") if f.is_file())
    size += sum(f.stat().st_size for f in (ROOT / "src" / "torchjob").rglob("*.py"))
    return image, digest, size


def apply_deploy(cluster: Cluster, workdir: Path, digest: str) -> None:
    """``deploy/`` through kustomize, with the operator's image set to the one pushed (``images:``), by its digest:
    deployed again after a change, the operator rolls out the new image (a tag that stays the same would leave
    each node running the image it already has)."""
    overlay = workdir / "operator-overlay"
    overlay.mkdir(parents=True, exist_ok=True)
    (overlay / "kustomization.yaml").write_text(
        json.dumps(
            {
                "resources": [os.path.relpath(DEPLOY, overlay)],
                "images": [{"name": "torchjob-operator", "newName": IMAGE_NAME, "digest": digest}],
            }
        )
    )
    rendered = cluster.kubectl("kustomize", "--load-restrictor=LoadRestrictionsNone", str(overlay)).stdout
    manifests = workdir / "operator-manifests.yaml"
    manifests.write_text(rendered)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifests))


def deploy(cluster: Cluster, workdir: Path, timeout: float = 240) -> tuple[str, int]:
    """Build, push and apply; wait until the operator's Deployment is Available. The image as shown (its name and
    the start of its digest) and its layer size."""
    image, digest, size = push_operator_image(cluster)
    apply_deploy(cluster, workdir, digest)
    waited = cluster.kubectl(
        "wait",
        "--for=condition=Available",
        "deployment/torchjob-operator",
        "-n",
        "torchjob-system",
        f"--timeout={timeout:.0f}s",
        check=False,
        timeout=timeout + 30,
    )
    if waited.returncode != 0:
        pods = cluster.kubectl("get", "pods", "-n", "torchjob-system", "-o", "wide", check=False).stdout
        raise RuntimeError(f"the operator's Deployment did not become Available in {timeout:.0f}s:\n{pods}")
    return f"{image} ({digest[:19]})", size


def scale_down(cluster: Cluster, timeout: float = 120) -> None:
    """No operator Pod left (its Deployment at 0 replicas): another controller may own the jobs meanwhile."""
    cluster.kubectl("scale", "deployment/torchjob-operator", "-n", "torchjob-system", "--replicas=0")
    cluster.kubectl(
        "wait",
        "--for=delete",
        "pod",
        "-l",
        "app.kubernetes.io/name=torchjob-operator",
        "-n",
        "torchjob-system",
        f"--timeout={timeout:.0f}s",
        check=False,
        timeout=timeout + 30,
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="kube-rig deploy-operator", description=__doc__)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "kuberig-kuberig")
    args = parser.parse_args()
    if not exists(args.dir):
        print(f"kube-rig: no cluster in {args.dir}: `kube-rig create` first", file=sys.stderr)
        return 1
    cluster = Cluster(args.dir)
    try:
        image, size = deploy(cluster, args.dir)
        push_example_images(cluster)  # the README's `torchjob submit examples/mnist/job.yaml` then runs as it is
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        print(f"kube-rig: {err}", file=sys.stderr)
        return 1
    print(f"kube-rig: the operator runs in torchjob-system from {image} (its layer {size / 2**20:.0f} MB, no torch)")
    print(f"kube-rig: pushed {EXAMPLE_MNIST}, the image examples/mnist/*.yaml run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
