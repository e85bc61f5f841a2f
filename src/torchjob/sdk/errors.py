"""Errors the SDK raises; each message is one line a user can act on."""


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
