"""Which Pod sent a progress report, as the real API server says (TokenReview of a projected token)."""

from __future__ import annotations

import base64
import json
import ssl
import time
from pathlib import Path

import pytest
from lightkube import Client, KubeConfig

from kuberig import Cluster
from tests.support.cluster_jobs import get_job, job_manifest, pods
from tests.support.operator import OperatorProcess
from tests.support.servers import free_port
from tests.support.waits import wait_until
from torchjob.backends.kubernetes.token_review import ApiTokenReviewer, PodIdentity
from torchjob.reporting import Refused, call_operator


def test_a_pod_bound_token_for_the_report_audience_names_its_pod_and_nothing_else_does(
    cluster: Cluster, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reporter", "namespace": namespace},
        "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    uid = cluster.kubectl("get", "pod", "reporter", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout

    def token(audience: str, bound: bool = True) -> str:
        binding = ["--bound-object-kind=Pod", "--bound-object-name=reporter", f"--bound-object-uid={uid}"]
        args = ["create", "token", "default", "-n", namespace, f"--audience={audience}", *(binding if bound else [])]
        return cluster.kubectl(*args).stdout.strip()

    reviewer = ApiTokenReviewer(Client(KubeConfig.from_file(str(cluster.kubeconfig))))
    assert reviewer.review(token("torchjob.io/reports")) == PodIdentity(namespace, "reporter", uid)
    assert reviewer.review(token("https://kubernetes.default.svc.cluster.local")) is None  # an API token
    assert reviewer.review(token("torchjob.io/reports", bound=False)) is None  # not bound to a Pod
    assert reviewer.review("not-a-token") is None


def test_the_report_endpoint_serves_tls_from_a_ca_it_keeps_and_gives_its_pods(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    """A second operator, for this namespace only, with its report endpoint: a CA and certificate in a Secret,
    the CA in every Pod it creates; a Pod's real token over TLS is heard, a Pod without the CA cannot send its
    token, a forged token and another namespace's Pod are refused."""
    port = free_port()
    reporting = OperatorProcess(
        operator.kubeconfig,
        tmp_path / "reporting.log",
        # Its own managedBy, so the session's operator leaves the job to it.
        ("--namespace", namespace, "--managed-by=torchjob.io/report-test", f"--report-address=127.0.0.1:{port}"),
    )
    reporting.start()
    try:
        secret = cluster.kubectl_json("get", "secret", "torchjob-report-tls", "-n", "torchjob-system")
        ca = base64.b64decode(secret["data"]["ca.crt"]).decode()
        cluster.apply(job_manifest("told", workers=1, run_policy={"managedBy": "torchjob.io/report-test"}), namespace)
        wait_until(lambda: "told-worker-0" in pods(cluster, namespace, "told"), what="the worker's Pod")
        env = {
            e["name"]: e.get("value")
            for e in pods(cluster, namespace, "told")["told-worker-0"]["spec"]["containers"][0]["env"]
        }
        assert env["TORCHJOB_REPORT_CA"] == ca
        url = env["TORCHJOB_REPORT_URL"]
        assert url.startswith(f"https://127.0.0.1:{port}/reports/{namespace}/told")

        uid = pods(cluster, namespace, "told")["told-worker-0"]["metadata"]["uid"]
        token = cluster.kubectl(
            "create",
            "token",
            "default",
            "-n",
            namespace,
            "--audience=torchjob.io/reports",
            "--bound-object-kind=Pod",
            "--bound-object-name=told-worker-0",
            f"--bound-object-uid={uid}",
        ).stdout.strip()
        (tmp_path / "token").write_text(token)
        report = {"step": 3, "time": time.time(), "total_steps": 10}
        with pytest.MonkeyPatch.context() as env_of_the_pod:
            env_of_the_pod.setenv("TORCHJOB_REPORT_CA", ca)
            assert call_operator(url, tmp_path / "token", report) == b""
            (tmp_path / "forged").write_text(token[:-4] + "AAAA")
            with pytest.raises(Refused) as forged:
                call_operator(url, tmp_path / "forged", report)
            assert forged.value.code == 401
            elsewhere = url.replace(f"/reports/{namespace}/", "/reports/default/")
            with pytest.raises(Refused) as other_namespace:
                call_operator(elsewhere, tmp_path / "token", report)
            assert other_namespace.value.code == 401
            env_of_the_pod.delenv("TORCHJOB_REPORT_CA")
            with pytest.raises(ssl.SSLCertVerificationError):
                call_operator(url, tmp_path / "token", report)
        wait_until(
            lambda: (
                (get_job(cluster, namespace, "told")["status"].get("trainerStatus") or {}).get("progressPercentage")
                == 30
            ),
            what="the report heard (30% in trainerStatus)",
        )
    finally:
        reporting.stop()
