"""OCI images built from local files and pushed to the cluster's registry.

Nothing here reaches an outside registry: an image is a stack of uncompressed tar layers (a Debian root
filesystem made by debootstrap, then the files an image adds) with an OCI config, uploaded through the
registry's HTTP API (the OCI distribution spec). The node's containerd uses that registry as a mirror for
every registry host, so a Pod names an image exactly as it would on a real cluster
(``docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727``) and pulls it under any pull policy.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Blob:
    """Content addressed by its sha256: a layer held in a file, or a small JSON document held in memory."""

    digest: str
    size: int
    path: Path | None = None
    data: bytes = b""

    def body(self) -> bytes | io.BufferedReader:
        return open(self.path, "rb") if self.path else self.data


def repository_and_tag(image: str) -> tuple[str, str]:
    """Where a mirror serves ``image``: the repository path without its registry host, and the tag.
    ``docker.io/kubeflowkatib/pytorch-mnist:v1`` → (``kubeflowkatib/pytorch-mnist``, ``v1``);
    ``registry.k8s.io/pause:3.10`` → (``pause``, ``3.10``); ``busybox`` → (``library/busybox``, ``latest``), as
    Docker Hub names its official images."""
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    first, _, rest = name.partition("/")
    host = "docker.io"
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, name = first, rest
    if host in ("docker.io", "registry-1.docker.io") and "/" not in name:
        name = f"library/{name}"
    return name, tag


def _digest_of_file(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    return "sha256:" + sha.hexdigest()


def _reset_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # Reproducible layers: the same files give the same digest, so the registry and containerd keep one copy.
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def rootfs_layer(rootfs: Path, cache: Path) -> Blob:
    """The whole of ``rootfs`` as one layer, written once into ``cache`` and reused while the tree is unchanged
    (its marker file ``.complete`` keeps its time)."""
    marker = rootfs / ".complete"
    stamp = f"{marker.stat().st_mtime_ns}" if marker.exists() else "unmarked"
    tar_path = cache / f"{rootfs.name}-{stamp}.tar"
    digest_path = tar_path.with_suffix(".digest")
    if not digest_path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        # A name of this process's own: two test sessions may write the same layer at once; either rename wins.
        partial = tar_path.with_suffix(f".{os.getpid()}.partial")
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            for entry in sorted(rootfs.iterdir()):
                if entry.name != ".complete":
                    tar.add(entry, arcname=entry.name, filter=_reset_owner)
        partial.rename(tar_path)
        digest_partial = digest_path.with_suffix(f".{os.getpid()}.partial")
        digest_partial.write_text(_digest_of_file(tar_path))
        digest_partial.rename(digest_path)
    return Blob(digest_path.read_text(), tar_path.stat().st_size, path=tar_path)


def files_layer(files: dict[str, Path | bytes], directory: Path, links: dict[str, str] | None = None) -> Blob:
    """A layer holding ``files`` (path in the image → a local file or folder, or the bytes of a file, which is
    executable when it starts with ``#!``) and symbolic ``links`` (path → target); written into ``directory``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for target, source in sorted(files.items()):
            arcname = target.lstrip("/")
            if isinstance(source, bytes):
                info = _reset_owner(tarfile.TarInfo(arcname))
                info.size, info.mode = len(source), 0o755 if source.startswith(b"#!") else 0o644
                tar.addfile(info, io.BytesIO(source))
            else:
                tar.add(
                    source,
                    arcname=arcname,
                    filter=lambda i: None if "__pycache__" in i.name else _reset_owner(i),
                )
        for target, points_to in sorted((links or {}).items()):
            info = _reset_owner(tarfile.TarInfo(target.lstrip("/")))
            info.type, info.linkname = tarfile.SYMTYPE, points_to
            tar.addfile(info)
    data = buffer.getvalue()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = directory / f"{digest[7:]}.tar"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Blob(digest, len(data), path=path)


def _json_blob(document: object) -> Blob:
    data = json.dumps(document, sort_keys=True).encode()
    return Blob("sha256:" + hashlib.sha256(data).hexdigest(), len(data), data=data)


def _request(method: str, url: str, body: bytes | io.BufferedReader | None = None, **headers: str) -> str:
    """One registry call; returns the Location header (upload URLs). The registry's error text on failure."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return str(answer.headers.get("Location", ""))
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"registry: {method} {url} answered {err.code}: {err.read()[:500]!r}") from None


def _upload(registry: str, repository: str, blob: Blob) -> None:
    base = f"http://{registry}/v2/{repository}/blobs/"
    try:
        _request("HEAD", base + blob.digest)
        return  # already there (layers are shared between images)
    except RuntimeError:
        pass
    location = urllib.parse.urljoin(base, _request("POST", base + "uploads/"))
    separator = "&" if "?" in location else "?"
    body = blob.body()
    try:
        _request(
            "PUT",
            f"{location}{separator}digest={blob.digest}",
            body,
            **{"Content-Type": "application/octet-stream", "Content-Length": str(blob.size)},
        )
    finally:
        if isinstance(body, io.BufferedReader):
            body.close()


def push(
    registry: str,
    image: str,
    layers: list[Blob],
    cmd: list[str] | None = None,
    entrypoint: list[str] | None = None,
    workdir: str = "/",
    env: tuple[str, ...] = (),
) -> str:
    """Upload ``layers`` (bottom first) and a config, and tag the manifest as ``image``; returns its digest."""
    repository, tag = repository_and_tag(image)
    settings: dict[str, object] = {"Env": [f"PATH={DEFAULT_PATH}", *env], "WorkingDir": workdir}
    if cmd:
        settings["Cmd"] = cmd
    if entrypoint:
        settings["Entrypoint"] = entrypoint
    config = _json_blob(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": settings,
            "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
        }
    )
    for blob in (*layers, config):
        _upload(registry, repository, blob)
    manifest = _json_blob(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": config.digest, "size": config.size},
            "layers": [{"mediaType": LAYER_TYPE, "digest": layer.digest, "size": layer.size} for layer in layers],
        }
    )
    _request(
        "PUT", f"http://{registry}/v2/{repository}/manifests/{tag}", manifest.data, **{"Content-Type": MANIFEST_TYPE}
    )
    return manifest.digest
