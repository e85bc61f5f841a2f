"""In a replica process forked from a warm interpreter (the local backend's warm_interpreter.py, a Pod's launcher,
pod.py): become what ``python SCRIPT ARGS`` would have been, then run the script as ``__main__``.

A cold interpreter sets these while it starts; a forked one inherits the warm interpreter's, so they are set
again here, from the replica's request: the environment (``os.environ``, and so what C code reads with
getenv), the command line shown by ``ps`` (proctitle.py), ``sys.argv``, ``sys.path`` (the script's folder, then
the replica's ``PYTHONPATH``, then the interpreter's own), the ``sitecustomize``/``usercustomize`` hooks that
the replica's ``PYTHONPATH`` brings (torchjob's progress reports among them), unbuffered output for ``-u`` or
``PYTHONUNBUFFERED``, fresh random seeds (a fork copies them), and torch's thread count from
``OMP_NUM_THREADS`` (read by OpenMP when the warm interpreter started, so set again through torch).

The script's end is the process's end, with the interpreter's normal shutdown (atexit hooks, non-daemon
threads joined, output flushed); an uncaught exception prints its traceback from the script's own frames on.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import random
import runpy
import signal
import site
import sys
from types import TracebackType
from typing import Any, NoReturn

from torchjob import forked
from torchjob.launch import proctitle

# The hooks Python's site module runs at start-up, looked up again on the replica's own PYTHONPATH.
_START_UP_HOOKS = ("sitecustomize", "usercustomize")


def run(request: dict[str, Any], base_path: list[str]) -> NoReturn:
    """Run the replica's script and exit as a cold interpreter would (raises SystemExit)."""
    entry = request["entry"]
    os.environ.clear()
    os.environ.update(request["env"])
    proctitle.set_command_line(request["command"])
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = os.getcwd() if entry["module"] else os.path.dirname(os.path.realpath(entry["target"]))
    sys.path[:] = [first, *(os.path.abspath(p) for p in pythonpath), *base_path]
    sys.argv[:] = list(entry["argv"])
    if entry["unbuffered"] or os.environ.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(write_through=True)
    _fresh_seeds()
    _threads_from_environment()
    if request.get("user_site"):
        site.addsitedir(request["user_site"])  # as Python's site module does at start-up, .pth files included
    _run_start_up_hooks(pythonpath)
    try:
        if entry["module"]:
            runpy.run_module(entry["target"], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(entry["target"], run_name="__main__")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        _print_uncaught(*sys.exc_info())
        # A cold interpreter ends by the signal then, so its parent sees it.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(130) from None
    except BaseException:  # noqa: BLE001 - the script's uncaught exception: print it, exit 1, as Python does
        _print_uncaught(*sys.exc_info())
        raise SystemExit(1) from None
    raise SystemExit(0)


def _fresh_seeds() -> None:
    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _threads_from_environment() -> None:
    threads = os.environ.get("OMP_NUM_THREADS", "")
    forked.settle_threads(int(threads) if threads.isdigit() and int(threads) > 0 else None)


def _run_start_up_hooks(pythonpath: list[str]) -> None:
    for name in _START_UP_HOOKS:
        spec = importlib.machinery.PathFinder.find_spec(name, [os.path.abspath(p) for p in pythonpath])
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 - as site.py does: say so, and run the script anyway
            print(f"Error in {name}; set PYTHONVERBOSE for traceback:\n{type(err).__name__}: {err}", file=sys.stderr)


def _print_uncaught(kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
    """The traceback from the script's first frame on: runpy's and torchjob's frames are not the script's."""
    ours = {os.path.realpath(runpy.__file__), os.path.realpath(__file__)}
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename, ours):
        tb = tb.tb_next
    if kind is not None and error is not None:
        # On the exception itself too: a hook may read sys.exc_info() (torch.distributed's does, to add "[rankN]:").
        error.__traceback__ = tb
        sys.excepthook(kind, error, tb)
    sys.stderr.flush()


def _is_ours(filename: str, ours: set[str]) -> bool:
    return filename.startswith("<frozen runpy") or os.path.realpath(filename) in ours
