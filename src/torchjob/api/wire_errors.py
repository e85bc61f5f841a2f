"""One line per pydantic error, as a YAML author would read it: the wire path, what is expected, what was given."""

from __future__ import annotations

from typing import Any


def describe(error: Any) -> str:
    """One line for one pydantic error: the wire path, what is expected, what was given."""
    parts: list[str] = []
    for item in error["loc"]:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        elif item == "[key]":
            continue
        else:
            parts.append(str(item))
    path = ".".join(parts) or "(top level)"
    kind = error["type"]
    given = error.get("input")
    if kind == "extra_forbidden":
        return f"{path}: unknown field"
    if kind == "missing":
        return f"{path}: required"
    if kind == "enum" and error["loc"] and error["loc"][-1] == "[key]":
        return f"{path}: unknown replica type {given!r}; expected Master or Worker"
    message = error["msg"]
    if message.startswith("Input should be"):
        message = "must be" + message[len("Input should be") :]
    message = _PLAIN_WORDS.get(kind, message)
    return f"{path}: {message}, got {given!r}"


# pydantic's words for a wrong type, as a YAML author would say them.
_PLAIN_WORDS = {
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "int_type": "must be an integer",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
}
