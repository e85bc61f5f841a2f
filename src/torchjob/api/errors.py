"""Errors raised for bad job input: each carries one line per problem, naming the field or file."""

from __future__ import annotations


class JobFileError(Exception):
    """A job file cannot be read or parsed (missing, malformed YAML, empty, not a mapping)."""


class ValidationError(Exception):
    """A PyTorchJob breaks the API's rules. ``problems`` holds one ``field.path: what is wrong`` line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))
