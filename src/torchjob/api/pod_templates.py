"""Structural checks of a replica's pod template, where the Kubernetes API server would refuse it.

The template is kept as the raw mapping it was given (every field must survive a round trip), so its shape
is checked here instead of by a model: what ``torchjob run`` reads from it (the containers, their command,
args, env, ports and workingDir) and what the API server would reject, so that ``validate`` refuses
everything that ``run`` or a cluster would, before anything starts. Fields this code does not know pass.
"""

from __future__ import annotations

import re
from typing import Any

from torchjob.api.names import DNS1123_LABEL
from torchjob.api.types import DEFAULT_CONTAINER_NAME

_IANA_SVC_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?=[a-z0-9]))*$")
_PROTOCOLS = ("TCP", "UDP", "SCTP")


def template_problems(path: str, template: Any) -> list[str]:
    """One ``field.path: what is expected, got what`` line per problem of a PodTemplateSpec."""
    if not isinstance(template, dict):
        return [f"{path}: must be a mapping (a pod template), got {_kind(template)}"]
    problems: list[str] = []
    metadata = template.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        problems.append(f"{path}.metadata: must be a mapping, got {_kind(metadata)}")
    spec = template.get("spec")
    if spec is None:
        return [*problems, f"{path}.spec: required (a pod spec with a container named {DEFAULT_CONTAINER_NAME!r})"]
    if not isinstance(spec, dict):
        return [*problems, f"{path}.spec: must be a mapping (a pod spec), got {_kind(spec)}"]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [*problems, f"{path}.spec.containers: must list at least the container {DEFAULT_CONTAINER_NAME!r}"]
    names: list[str] = []
    for field in ("containers", "initContainers"):
        listed = spec.get(field)
        if listed is None:
            continue
        if not isinstance(listed, list):
            problems.append(f"{path}.spec.{field}: must be a list of containers, got {_kind(listed)}")
            continue
        for i, container in enumerate(listed):
            problems += _container_problems(f"{path}.spec.{field}", i, container, names)
    if DEFAULT_CONTAINER_NAME not in names:
        shown = ", ".join(repr(n) for n in names) or "none"
        problems.append(f"{path}.spec.containers: must have a container named {DEFAULT_CONTAINER_NAME!r}, got {shown}")
    return problems


def _container_problems(path: str, index: int, container: Any, names: list[str]) -> list[str]:
    if not isinstance(container, dict):
        return [f"{path}[{index}]: must be a mapping (a container), got {_kind(container)}"]
    name = container.get("name")
    here = f"{path}[{name if isinstance(name, str) and name else index}]"
    problems: list[str] = []
    if not isinstance(name, str) or not name:
        problems.append(f"{here}.name: required (a DNS-1123 label such as {DEFAULT_CONTAINER_NAME!r})")
    elif len(name) > 63 or not DNS1123_LABEL.match(name):
        problems.append(f"{here}.name: must be a DNS-1123 label (lowercase letters, digits, '-'), got {name!r}")
    elif name in names:
        problems.append(f"{here}.name: must be unique within the pod, {name!r} is used twice")
    else:
        names.append(name)
    image = container.get("image")
    if not image:
        problems.append(f"{here}.image: required")
    elif not isinstance(image, str):
        problems.append(f"{here}.image: must be a string, got {_kind(image)}")
    for field in ("command", "args"):
        problems += _strings_problems(f"{here}.{field}", container.get(field))
    working_dir = container.get("workingDir")
    if working_dir is not None and not isinstance(working_dir, str):
        problems.append(f"{here}.workingDir: must be a string, got {_kind(working_dir)}")
    elif isinstance(working_dir, str) and "\0" in working_dir:
        problems.append(f"{here}.workingDir: must not contain NUL bytes")
    problems += _env_problems(f"{here}.env", container.get("env"))
    problems += _ports_problems(f"{here}.ports", container.get("ports"))
    for field in ("resources", "securityContext", "livenessProbe", "readinessProbe"):
        value = container.get(field)
        if value is not None and not isinstance(value, dict):
            problems.append(f"{here}.{field}: must be a mapping, got {_kind(value)}")
    return problems


def _strings_problems(path: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        return [f"{path}: must be a list of strings, got {_kind(value)}"]
    for i, item in enumerate(value):
        if not isinstance(item, str):
            return [f"{path}[{i}]: must be a string (quote it), got {_kind(item)} {item!r}"]
        if "\0" in item:
            return [f"{path}[{i}]: must not contain NUL bytes"]
    return []


def env_name_problem(name: Any) -> str | None:
    """Why ``name`` is no valid environment variable name (Kubernetes: printable ASCII, no '='), or None."""
    if not isinstance(name, str) or not name:
        return "required (a string)"
    if "=" in name or any(not 32 <= ord(c) <= 126 for c in name):
        return f"must be printable ASCII without '=', got {name!r}"
    return None


def _env_problems(path: str, env: Any) -> list[str]:
    if env is None:
        return []
    if not isinstance(env, list):
        return [f"{path}: must be a list of {{name, value}} entries, got {_kind(env)}"]
    problems = []
    for i, entry in enumerate(env):
        if not isinstance(entry, dict):
            problems.append(f"{path}[{i}]: must be a mapping with name and value, got {_kind(entry)}")
            continue
        problem = env_name_problem(entry.get("name"))
        if problem:
            problems.append(f"{path}[{i}].name: {problem}")
            continue
        here = f"{path}[{entry['name']}]"
        value = entry.get("value")
        if value is not None and not isinstance(value, str):
            problems.append(f"{here}.value: must be a string (quote it), got {_kind(value)} {value!r}")
        elif isinstance(value, str) and "\0" in value:
            problems.append(f"{here}.value: must not contain NUL bytes")
        source = entry.get("valueFrom")
        if source is not None and not isinstance(source, dict):
            problems.append(f"{here}.valueFrom: must be a mapping, got {_kind(source)}")
        elif source is not None and value:
            problems.append(f"{here}: may not have both value and valueFrom")
    return problems


def _ports_problems(path: str, ports: Any) -> list[str]:
    if ports is None:
        return []
    if not isinstance(ports, list):
        return [f"{path}: must be a list of ports, got {_kind(ports)}"]
    problems = []
    for i, port in enumerate(ports):
        if not isinstance(port, dict):
            problems.append(f"{path}[{i}]: must be a mapping with containerPort, got {_kind(port)}")
            continue
        number = port.get("containerPort")
        if type(number) is not int or not 1 <= number <= 65535:
            problems.append(f"{path}[{i}].containerPort: must be an integer from 1 to 65535, got {number!r}")
        name = port.get("name")
        if name is not None and (not isinstance(name, str) or len(name) > 15 or not _IANA_SVC_NAME.match(name)):
            problems.append(f"{path}[{i}].name: must be an IANA service name (at most 15 characters), got {name!r}")
        protocol = port.get("protocol")
        if protocol is not None and protocol not in _PROTOCOLS:
            problems.append(f"{path}[{i}].protocol: must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}")
    return problems


def _kind(value: Any) -> str:
    """How a YAML author would name a value's type."""
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)
