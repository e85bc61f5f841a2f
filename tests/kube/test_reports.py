"""Which Pod sent a progress report, as the real API server says (TokenReview of a projected token)."""

from __future__ import annotations

import json

from lightkube import Client, KubeConfig

from kuberig import Cluster
from torchjob.backends.kubernetes.report_board import ApiTokenReviewer, PodIdentity


def test_a_pod_bound_token_for_the_report_audience_names_its_pod_and_nothing_else_does(
    rig: Cluster, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reporter", "namespace": namespace},
        "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]},
    }
    rig.kubectl("apply", "-f", "-", input=json.dumps(pod))
    uid = rig.kubectl("get", "pod", "reporter", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout

    def token(audience: str, bound: bool = True) -> str:
        binding = ["--bound-object-kind=Pod", "--bound-object-name=reporter", f"--bound-object-uid={uid}"]
        args = ["create", "token", "default", "-n", namespace, f"--audience={audience}", *(binding if bound else [])]
        return rig.kubectl(*args).stdout.strip()

    reviewer = ApiTokenReviewer(Client(KubeConfig.from_file(str(rig.kubeconfig))))
    assert reviewer.review(token("torchjob.io/reports")) == PodIdentity(namespace, "reporter", uid)
    assert reviewer.review(token("https://kubernetes.default.svc.cluster.local")) is None  # an API token
    assert reviewer.review(token("torchjob.io/reports", bound=False)) is None  # not bound to a Pod
    assert reviewer.review("not-a-token") is None
