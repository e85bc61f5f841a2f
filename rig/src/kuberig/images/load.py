"""Build an image from local files and push it to the cluster's registry under any name (kind's
``load docker-image``, with no Docker: the layers are tar files, see ``images/oci.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kuberig import toolchain
from kuberig.images import oci


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


def folder_files(folder: Path, target: str) -> dict[str, Path | bytes]:
    """The files of an image made from ``folder``, placed at ``target`` in it."""
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder")
    return {target: folder}
