"""Reading job input as the API server would: bounded in size, depth and alias expansion, strict about keys.

A job file is untrusted input. Whatever it holds, reading it ends within a fraction of a second with either
one mapping or one ``JobFileError`` line naming the file and, where there is one, the line:

- at most ``MAX_INPUT_BYTES`` (4 MiB, etcd's request limit), read in bounded chunks, so ``/dev/zero``
  or a huge file is refused at once;
- text only: UTF-8, no NUL bytes;
- no key twice in one mapping (the API server refuses duplicates too);
- YAML aliases may not expand past ``MAX_NODES`` nodes (a "billion laughs" file is a few hundred bytes)
  nor refer to themselves, and nothing may nest deeper than ``MAX_DEPTH`` levels;
- timestamps stay strings, as they do on their way through Kubernetes' YAML-to-JSON conversion.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Any

import yaml

from torchjob.api.errors import JobFileError

MAX_INPUT_BYTES = 4 * 1024 * 1024
MAX_NODES = 20_000  # values once aliases are expanded
MAX_EVENTS = 20_000  # values as written: a job file holds a few hundred
MAX_DEPTH = 64
STDIN = "-"


def read_text(path: str) -> str:
    """The text of the file at ``path`` (``-``: standard input), refused when not text or too large."""
    if path == STDIN:
        return decode(_read_bounded(sys.stdin.buffer, "standard input"), "standard input")
    source = Path(path)
    if source.is_dir():
        raise JobFileError(f"{path}: is a directory, expected a PyTorchJob YAML file")
    try:
        with open(source, "rb") as f:
            data = _read_bounded(f, path)
    except FileNotFoundError:
        raise JobFileError(f"{path}: no such file") from None
    except OSError as err:
        raise JobFileError(f"{path}: cannot be read ({err.strerror or err})") from None
    return decode(data, path)


def decode(data: bytes, source: str) -> str:
    if b"\x00" in data:
        raise JobFileError(f"{source}: not a text file (it holds NUL bytes); expected PyTorchJob YAML")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JobFileError(f"{source}: not UTF-8 text (byte {err.start} cannot be decoded)") from None


def _read_bounded(stream: IO[bytes], source: str) -> bytes:
    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise JobFileError(f"{source}: larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB; a job file is far smaller")
    return data


def without_status(document: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The job as written, less any ``status`` (as ``kubectl apply`` does: a status belongs to whoever runs the
    job, never to its input), and the note that says so."""
    if "status" not in document:
        return document, []
    kept = {k: v for k, v in document.items() if k != "status"}
    return kept, ["status: ignored (a job's status is written by whoever runs it; this one starts afresh)"]


def load_documents(text: str, source: str) -> list[Any]:
    """Every non-empty YAML document in ``text``, as plain Python data (JSON is YAML too)."""
    if len(text.encode("utf-8", errors="replace")) > MAX_INPUT_BYTES:
        raise JobFileError(f"{source}: larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB; a job file is far smaller")
    loader = _StrictLoader(text)
    documents = []
    try:
        _check_nesting(text, source)
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _check_shape(node, source)
            documents.append(loader.construct_document(node))
    except yaml.YAMLError as err:
        raise JobFileError(_yaml_problem(err, source)) from None
    except RecursionError:
        raise JobFileError(f"{source}: nested too deeply (more than {MAX_DEPTH} levels)") from None
    finally:
        loader.dispose()
    return [d for d in documents if d is not None]


class _StrictLoader(yaml.CSafeLoader):
    """PyYAML's safe loader (libyaml's parser) that refuses duplicate keys and leaves timestamps as strings."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # Checked before merge keys (`<<: *base`) are flattened in: a key written out may override a merged one.
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark
                ) from None
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


# Kubernetes reads YAML into JSON, where a timestamp is a string: keep `2024-01-01` as written.
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
}


def _check_nesting(text: str, source: str) -> None:
    """Refuse deep nesting before PyYAML's recursive composer meets it (the event stream is flat), and a
    file of absurdly many values before anything is built from it."""
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=yaml.CSafeLoader)):
        if count > MAX_EVENTS:
            raise JobFileError(f"{source}: holds more than {MAX_EVENTS} values; a job file needs far fewer")
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise JobFileError(f"{source}: nested too deeply (more than {MAX_DEPTH} levels) at line {line}")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def _check_shape(root: yaml.Node, source: str) -> None:
    """Refuse a node graph that nests too deeply, refers to itself, or expands past MAX_NODES.

    Aliases make the graph a DAG whose expansion can be exponential in its size, so sizes are counted per
    distinct node (memoized), iteratively: the check itself never recurses nor expands anything.
    """
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(child)] for child in _children(node))
            if size[key] > MAX_NODES:
                raise JobFileError(
                    f"{source}: expands to more than {MAX_NODES} values through YAML aliases "
                    f"(line {node.start_mark.line + 1}); a job file needs far fewer"
                )
            continue
        if key in size:
            continue
        if key in on_path:
            raise JobFileError(f"{source}: a YAML alias refers to itself (line {node.start_mark.line + 1})")
        if depth > MAX_DEPTH:
            raise JobFileError(
                f"{source}: nested too deeply (more than {MAX_DEPTH} levels) at line {node.start_mark.line + 1}"
            )
        on_path.add(key)
        stack.append((node, depth, True))
        stack += [(child, depth + 1, False) for child in _children(node) if id(child) not in size]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _yaml_problem(err: yaml.YAMLError, source: str) -> str:
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{source}: not valid YAML{where}: {problem}"
