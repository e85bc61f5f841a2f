"""Build an image from local files and push it to the cluster's registry under any name (kind's
``load docker-image``, with no Docker: the layers are tar files, see ``images/oci.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kuberig import toolchain
from kuberig.images import oci
from kuberig.naming import RUNTIME_MOUNT

# A .pth file on the base image's python3 path that adds the node's Python environment, which every kubelet node
# mounts read-only into its containers (node/configs.py mounts it): torch and all, without a multi-GB layer per image.
NODE_PYTHON = {"/usr/lib/python3/dist-packages/kuberig-node-python.pth": f"{RUNTIME_MOUNT}\n".encode()}


def push_image(
    registry: str,
    layers_dir: Path,
    image: str,
    files: dict[str, Path | bytes],
    links: dict[str, str] | None = None,
    base: bool = True,
    **config: Any,
) -> str:
    """Publish ``image`` under its own name: the Debian base with python3 (unless ``base`` is false), plus
    ``files`` (path in the image → a local file or folder, or bytes) and symbolic ``links``. Returns the digest."""
    layers = [oci.rootfs_layer(toolchain.rootfs(), toolchain.cache_dir() / "real-node" / "layers")] if base else []
    layers.append(oci.files_layer(files, layers_dir, links or {}))
    return oci.push(registry, image, layers, **config)


def folder_files(folder: Path, target: str, node_python: bool = True) -> dict[str, Path | bytes]:
    """The files of an image made from ``folder``, placed at ``target`` in it; with ``node_python``, the node's
    Python environment on ``python3``'s path too (:data:`NODE_PYTHON`)."""
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder")
    return {**(NODE_PYTHON if node_python else {}), target: folder}


def env_pairs(values: list[str]) -> tuple[str, ...]:
    """``KEY=VALUE`` settings for an image's config, each checked; a ValueError names the one that is not."""
    for value in values:
        key, sep, _ = value.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise ValueError(f"--env: expected KEY=VALUE with KEY a variable name, got {value!r}")
    return tuple(values)
