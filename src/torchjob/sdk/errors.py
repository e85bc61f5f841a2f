"""Errors the SDK raises; each message is one line a user can act on."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from torchjob.backends.local.store import DamagedRecord, UnusableHome

_P = ParamSpec("_P")
_R = TypeVar("_R")


class SdkError(Exception):
    """Base of the SDK's errors."""


class JobNotFoundError(SdkError):
    def __init__(self, name: str) -> None:
        super().__init__(f"job {name!r} not found (see `torchjob list`)")


class JobExistsError(SdkError):
    def __init__(self, name: str, state: str) -> None:
        super().__init__(
            f"job {name!r} already exists ({state or 'Created'}); delete it with `torchjob delete {name}` "
            "or run with --replace"
        )


class JobStillRunningError(SdkError):
    def __init__(self, name: str) -> None:
        super().__init__(
            f"job {name!r} is still running; stop it with `torchjob delete {name}` (or wait for it) before replacing it"
        )


class UnreadableRecordError(SdkError):
    """A record of a local job is damaged, or the state directory cannot be used; the message names the file."""


def store_errors(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Damaged records and an unusable state directory reach the user as one line naming the file."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except (DamagedRecord, UnusableHome) as err:
            raise UnreadableRecordError(str(err)) from None

    return wrapper
