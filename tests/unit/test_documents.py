"""Strict YAML reading: what stays allowed (merge keys, small aliases, JSON) and what Kubernetes would keep."""

from __future__ import annotations

import pytest

from torchjob.api.documents import MAX_DEPTH, load_documents
from torchjob.api.errors import JobFileError


def _nested(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels - 1):
        value = [value]
    return value


DEEPEST = _nested(MAX_DEPTH - 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 5\n", {"base": {"x": 1, "y": 2}, "c": {"x": 5, "y": 2}}),
        ("a: &a [1, 2]\nb: *a\n", {"a": [1, 2], "b": [1, 2]}),
        ("created: 2024-01-01\nat: 2024-01-01T10:00:00Z\n", {"created": "2024-01-01", "at": "2024-01-01T10:00:00Z"}),
        ('{"json": [1, true, null]}', {"json": [1, True, None]}),
        ("flag: yes\n", {"flag": True}),  # YAML 1.1, as the API server's YAML reader has it
        # The top-level mapping is the first level.
        ("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1), {"a": DEEPEST}),
    ],
    ids=["merge-key-override", "alias", "timestamps-stay-strings", "json", "yaml-1.1-bool", "deepest-allowed"],
)
def test_allowed(text: str, expected: object) -> None:
    [document] = load_documents(text, "f.yaml")
    assert document == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\na: 2\n", "line 2, column 1: duplicate key 'a' (first at line 1)"),
        ("a: {b: 1, b: 2}\n", "duplicate key 'b'"),
        ("a: &a [*a]\n", "a YAML alias refers to itself"),
        ("a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH, f"nested too deeply (more than {MAX_DEPTH} levels)"),
        ("a: !!python/name:os.system\n", "could not determine a constructor"),
    ],
    ids=["duplicate", "duplicate-flow", "self-alias", "too-deep", "python-tag"],
)
def test_refused(text: str, message: str) -> None:
    with pytest.raises(JobFileError, match=r"^f\.yaml: ") as caught:
        load_documents(text, "f.yaml")
    assert message in str(caught.value)
