"""Nodes: a simulated one (kwok) and a real one (kubelet + containerd in a namespace of its own), behind one
small interface, as kind's ``nodes.Node``."""

from __future__ import annotations

from typing import Protocol


class Node(Protocol):
    """A node of the cluster: its name as the API knows it, its kind (``kwok`` or ``kubelet``) and address."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def ip(self) -> str: ...
