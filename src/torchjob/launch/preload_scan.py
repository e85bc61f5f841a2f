"""Whether a script's first replicas can start before the warm interpreter has imported what only some scripts
need (``preload.DEFERRABLE``: ``torch._dynamo``, about 40% of the preload's time).

``torch._dynamo`` is imported by DDP's constructor, ``torch.compile``, FSDP and ``torch.export``. A script that
joins a process group and runs collectives without them never imports it. The interpreter reads the script and
what it imports from its own folder (where ``sys.path[0]`` finds it), and forks the first replicas before that
import only when everything it reads is known not to reach it: the standard library, numpy, torch's modules in
``_TORCH_SAFE``, no name that reaches it (``DistributedDataParallel``, ``compile``...) and no import it cannot
see (``importlib``, ``exec``, a relative import). Anything else (another package, a ``-m`` module, a file it
cannot read or parse) keeps the whole preload first, as before. So a wrong guess costs speed only, and once:
the interpreter imports the rest right after the first replicas are forked, so every restart finds it.

Reads files; decides nothing else.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from torchjob.launch.entry import WarmEntry

# Modules of torch a script may import without reaching torch._dynamo (none of them imports it).
_TORCH_SAFE = frozenset(
    {
        "torch",
        "torch.autograd",
        "torch.cuda",
        "torch.distributed",
        "torch.multiprocessing",
        "torch.nn",
        "torch.nn.functional",
        "torch.optim",
        "torch.utils",
        "torch.utils.data",
    }
)
# Packages outside the standard library known not to import torch._dynamo.
_OTHERS_SAFE = frozenset({"numpy"})
# Names whose use reaches torch._dynamo, or loads code this reading cannot see, as a name or an attribute
# (DDP and FSDP, torch.compile and torch.compiler, torch.export, torch.nn.parallel; importlib, runpy).
_REACHING = frozenset(
    {
        "DistributedDataParallel",
        "FullyShardedDataParallel",
        "fully_shard",
        "parallel",
        "compile",
        "compiler",
        "export",
        "_dynamo",
        "_inductor",
        "import_module",
        "run_path",
        "run_module",
    }
)
# Built-ins that run or import code this reading cannot see, called by their bare name.
_HIDING_BUILTINS = frozenset({"exec", "eval", "__import__"})
# A script that imports more of its own folder than this is not read to the end: it keeps the whole preload.
_MAX_FILES = 64
_MAX_BYTES = 4 << 20  # per file: larger is not a script anyone wrote by hand


def can_start_before_deferred(entry: WarmEntry, cwd: str) -> bool:
    """Whether the replica that ``entry`` starts (in ``cwd``) is shown not to need ``preload.DEFERRABLE`` when it
    starts. False for anything this reading cannot show."""
    if entry.module:
        return False
    script = Path(cwd, entry.target)
    return _clear(script, script.parent)


def _clear(script: Path, folder: Path) -> bool:
    read: set[Path] = set()
    unread = [script]
    while unread:
        path = unread.pop()
        if path in read:
            continue
        read.add(path)
        if len(read) > _MAX_FILES:
            return False
        try:
            if not path.is_file() or path.stat().st_size > _MAX_BYTES:  # a pipe would block the reading
                return False
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):  # MemoryError: "too deep" to parse
            return False
        for node in ast.walk(tree):
            local = _local_files(node, folder)
            if local is None:
                return False
            unread.extend(local)
    return True


def _local_files(node: ast.AST, folder: Path) -> list[Path] | None:
    """The files of ``folder`` that ``node`` imports; None when the node may reach torch._dynamo."""
    if isinstance(node, ast.Name):
        return None if node.id in _REACHING or node.id in _HIDING_BUILTINS else []
    if isinstance(node, ast.Attribute):
        return None if node.attr in _REACHING else []
    if isinstance(node, ast.Import):
        return _modules_files([alias.name for alias in node.names], folder)
    if isinstance(node, ast.ImportFrom):
        return _from_import_files(node, folder)
    return []


def _modules_files(modules: list[str], folder: Path) -> list[Path] | None:
    files: list[Path] = []
    for module in modules:
        found = _module_files(module, folder)
        if found is None:
            return None
        files += found
    return files


def _from_import_files(node: ast.ImportFrom, folder: Path) -> list[Path] | None:
    if node.level or node.module is None:
        return None  # relative: a script run as __main__ has no package to be relative to
    if any(alias.name == "*" or alias.name in _REACHING for alias in node.names):
        return None
    found = _module_files(node.module, folder)
    if found and found[-1].name == "__init__.py":  # from a package of the folder: its modules named too
        package = found[-1].parent
        found += [f for a in node.names for f in (package / f"{a.name}.py", package / a.name / "__init__.py")]
    return None if found is None else [f for f in found if f.is_file()]


def _module_files(module: str, folder: Path) -> list[Path] | None:
    """The files in ``folder`` that importing ``module`` runs ([] for a module known safe); None if unknown."""
    parts = module.split(".")
    if any(part in _REACHING for part in parts):
        return None
    files: list[Path] = []
    where = folder
    for part in parts:  # the folder comes first on sys.path: a file of it shadows a package of the same name
        package, plain = where / part / "__init__.py", where / f"{part}.py"
        if package.is_file():
            files.append(package)
            where = where / part
        elif plain.is_file():
            return [*files, plain]
        elif files:
            return None  # a package of the folder without that module
        else:
            break
    if files:
        return files
    top = parts[0]
    if top == "torch":
        return [] if module in _TORCH_SAFE else None
    return [] if top in sys.stdlib_module_names or top in _OTHERS_SAFE else None
