"""Which scripts start before the warm interpreter imports torch._dynamo (launch/preload_scan.py): only those
whose every line it reads is known not to reach it; anything it cannot see through keeps the whole preload."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchjob.launch import preload
from torchjob.launch.entry import WarmEntry
from torchjob.launch.preload_scan import can_start_before_deferred

COLLECTIVE = """
import os, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
import numpy as np

dist.init_process_group("gloo")
value = torch.ones(1)
dist.all_reduce(value)
model = torch.nn.Linear(2, 1)
model.eval()
"""


def starts_early(folder: Path, script: str, **files: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (folder / "train.py").write_text(script)
    return can_start_before_deferred(WarmEntry(module=False, target="train.py", argv=["train.py"]), str(folder))


def test_a_script_of_collectives_with_the_standard_library_and_numpy_starts_early(tmp_path: Path) -> None:
    assert starts_early(tmp_path, COLLECTIVE)


@pytest.mark.parametrize(
    "line",
    [
        "from torch.nn.parallel import DistributedDataParallel",
        "model = torch.nn.parallel.DistributedDataParallel(model)",
        "from torch.nn.parallel import DistributedDataParallel as DDP",
        "model = torch.compile(model)",
        "from torch import compile",
        "import torch.distributed.fsdp",
        "import torch._dynamo",
        "import torchvision",  # a package it does not know
        "import importlib; importlib.import_module('helpers')",
        "exec(open('more.py').read())",
        "from torch import *",
    ],
)
def test_a_script_that_may_reach_torch_dynamo_waits_for_the_whole_preload(tmp_path: Path, line: str) -> None:
    assert not starts_early(tmp_path, COLLECTIVE + line + "\n")


def test_the_modules_of_the_scripts_own_folder_are_read_too(tmp_path: Path) -> None:
    clean = "import torch\n\ndef build():\n    return torch.nn.Linear(2, 1)\n"
    ddp = "import torch\n\ndef wrap(m):\n    return torch.nn.parallel.DistributedDataParallel(m)\n"
    assert starts_early(tmp_path / "a", COLLECTIVE + "import helpers\n", **{"helpers.py": clean})
    assert not starts_early(tmp_path / "b", COLLECTIVE + "import helpers\n", **{"helpers.py": ddp})
    package = {"lib/__init__.py": "", "lib/models.py": ddp}
    assert not starts_early(tmp_path / "c", COLLECTIVE + "from lib import models\n", **package)
    assert not starts_early(tmp_path / "d", COLLECTIVE + "import lib.models\n", **package)
    assert starts_early(tmp_path / "e", COLLECTIVE + "from lib import models\n", **{**package, "lib/models.py": clean})
    # A file of the folder shadows the package of the same name: it is what the script imports.
    assert not starts_early(tmp_path / "f", COLLECTIVE + "import numpy\n", **{"numpy.py": ddp})


def test_what_it_cannot_read_keeps_the_whole_preload(tmp_path: Path) -> None:
    assert not starts_early(tmp_path / "a", COLLECTIVE + "def broken(:\n")
    assert not starts_early(tmp_path / "b", COLLECTIVE + "from . import helpers\n")
    # Too deep for the parser, which says so with a MemoryError (a RecursionError elsewhere): the full preload
    assert not starts_early(tmp_path / "c", COLLECTIVE + "x = " + "-" * 100_000 + "1\n")
    missing = WarmEntry(module=False, target="absent.py", argv=["absent.py"])
    assert not can_start_before_deferred(missing, str(tmp_path))
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)  # read, it would block until a writer came
    assert not can_start_before_deferred(WarmEntry(module=False, target="fifo.py", argv=["fifo.py"]), str(tmp_path))
    module = WarmEntry(module=True, target="train", argv=["train"])
    assert not can_start_before_deferred(module, str(tmp_path))


def test_a_local_module_imported_in_a_cycle_is_read_once(tmp_path: Path) -> None:
    files = {"a.py": "import b\n", "b.py": "import a\n"}
    assert starts_early(tmp_path, COLLECTIVE + "import a\n", **files)


def test_only_the_deferrable_preloads_wait_and_only_when_asked() -> None:
    modules = ["torch", "torch.optim", "torch._dynamo", "torchjob.autoreport"]
    assert preload.staged(modules, defer=True) == (["torch", "torch.optim", "torchjob.autoreport"], ["torch._dynamo"])
    assert preload.staged(modules, defer=False) == (modules, [])
