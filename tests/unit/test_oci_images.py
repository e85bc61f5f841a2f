"""Where the real node's registry mirror serves an image: the repository path a Pod's image name maps to."""

from __future__ import annotations

import pytest

from kuberig.images.oci import repository_and_tag


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727", ("kubeflowkatib/pytorch-mnist", "v1beta1-45c5727")),
        ("kubeflowkatib/pytorch-mnist:v1", ("kubeflowkatib/pytorch-mnist", "v1")),
        ("alpine:3.10", ("library/alpine", "3.10")),  # Docker Hub's official images live under library/
        ("busybox", ("library/busybox", "latest")),
        ("registry.k8s.io/pause:3.10", ("pause", "3.10")),  # other registries have no library/
        ("ghcr.io/torchjob/examples-mnist:0.1", ("torchjob/examples-mnist", "0.1")),
        ("localhost:5000/team/train", ("team/train", "latest")),
    ],
)
def test_repository_and_tag(image: str, expected: tuple[str, str]) -> None:
    assert repository_and_tag(image) == expected
