"""The torchjob operator on the real control plane: PyTorchJobs applied with kubectl, Pods ended through kwok.

The operator runs as its own process with the least-privilege account from deploy/ (the ``operator``
fixture), so every test also proves the RBAC is enough.
"""

from __future__ import annotations

import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kuberig import Cluster
from kuberig.node.resources import GPU, advertise
from tests.support.cluster_jobs import get_job, job_manifest, pods, running_pods
from tests.support.operator import OperatorProcess
from tests.support.waits import wait_until


def state(cluster: Cluster, namespace: str, name: str) -> str:
    conditions = get_job(cluster, namespace, name).get("status", {}).get("conditions", [])
    return str(conditions[-1]["type"]) if conditions else ""


def condition(cluster: Cluster, namespace: str, name: str, ctype: str) -> dict[str, Any] | None:
    conditions = get_job(cluster, namespace, name).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == ctype and c["status"] == "True"), None)


def wait_state(cluster: Cluster, namespace: str, name: str, wanted: str, timeout: float = 60) -> None:
    wait_until(lambda: state(cluster, namespace, name) == wanted, timeout, what=f"{name} to be {wanted}")


def start(cluster: Cluster, namespace: str, manifest: dict[str, Any], replicas: int = 3) -> None:
    cluster.apply(manifest, namespace)
    name = manifest["metadata"]["name"]
    wait_until(
        lambda: len(running_pods(cluster, namespace, name)) == replicas, what=f"{replicas} running pods of {name}"
    )
    wait_state(cluster, namespace, name, "Running")


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_master_and_two_workers_get_the_contract_pods_services_labels_and_env(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    start(cluster, namespace, job_manifest("mnist"))
    job = get_job(cluster, namespace, "mnist")
    found = pods(cluster, namespace, "mnist")
    assert sorted(found) == ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"]
    master, worker1 = found["mnist-master-0"], found["mnist-worker-1"]
    assert (
        master["metadata"]["labels"].items()
        >= {
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/job-name": "mnist",
            "training.kubeflow.org/replica-type": "master",
            "training.kubeflow.org/replica-index": "0",
            "training.kubeflow.org/job-role": "master",
        }.items()
    )
    assert "training.kubeflow.org/job-role" not in worker1["metadata"]["labels"]
    owner = master["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "PyTorchJob",
        "mnist",
        job["metadata"]["uid"],
        True,
    )
    assert (
        env_of(master).items()
        >= {
            "MASTER_ADDR": "mnist-master-0",
            "MASTER_PORT": "23456",
            "WORLD_SIZE": "3",
            "RANK": "0",
            "PET_NODE_RANK": "0",
            "PET_NNODES": "3",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",  # no CPU named: a thread a process, as locally
        }.items()
    )
    assert (env_of(worker1)["RANK"], env_of(worker1)["MASTER_ADDR"]) == ("2", "mnist-master-0")
    ports = master["spec"]["containers"][0]["ports"]
    assert {"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"} in ports

    for name in found:
        service = cluster.kubectl_json("get", "-n", namespace, "service", name)
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["ports"][0]["port"] == 23456
        selected = cluster.kubectl_json(
            "get", "-n", namespace, "pods", "-l", ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
        )["items"]
        assert [p["metadata"]["name"] for p in selected] == [name]

    statuses = job["status"]["replicaStatuses"]
    assert (statuses["Master"]["active"], statuses["Worker"]["active"]) == (1, 2)
    table = cluster.kubectl("get", "-n", namespace, "pytorchjobs").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATE", "PROGRESS", "%", "AGE"]
    assert table[1].split()[:2] == ["mnist", "Running"]


def test_the_master_succeeding_makes_the_job_succeed_and_clean_pod_policy_all_removes_pods(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    start(cluster, namespace, job_manifest("done", run_policy={"cleanPodPolicy": "All"}))
    cluster.end_pod(namespace, "done-master-0", 0)
    wait_state(cluster, namespace, "done", "Succeeded")
    assert get_job(cluster, namespace, "done")["status"]["completionTime"]
    wait_until(lambda: not pods(cluster, namespace, "done"), what="cleanPodPolicy All to remove every pod")


def test_clean_pod_policy_none_keeps_the_pods(cluster: Cluster, namespace: str, operator: OperatorProcess) -> None:
    start(cluster, namespace, job_manifest("keep", run_policy={"cleanPodPolicy": "None"}))
    cluster.end_pod(namespace, "keep-master-0", 0)
    wait_state(cluster, namespace, "keep", "Succeeded")
    assert sorted(pods(cluster, namespace, "keep")) == ["keep-master-0", "keep-worker-0", "keep-worker-1"]


def test_exit_code_1_under_exit_code_policy_fails_the_job_naming_pod_and_code(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    start(cluster, namespace, job_manifest("bad"))
    cluster.end_pod(namespace, "bad-worker-0", 1)
    wait_state(cluster, namespace, "bad", "Failed")
    failed = condition(cluster, namespace, "bad", "Failed")
    assert failed is not None and failed["reason"] == "PyTorchJobFailed"
    assert "worker-0 exited with code 1" in failed["message"]
    # Default cleanPodPolicy (None) keeps pods, but a Failed job leaves nothing running (kubeflow #1579).
    wait_until(lambda: not running_pods(cluster, namespace, "bad"), what="the other replicas to be stopped")
    events = cluster.kubectl_json("get", "-n", namespace, "events", "--field-selector", "involvedObject.name=bad")
    assert any(e["reason"] == "Failed" and "exited with code 1" in e["message"] for e in events["items"])


def test_exit_137_recreates_the_group_as_a_new_counted_attempt(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    start(cluster, namespace, job_manifest("oom"))
    before = {name: p["metadata"]["uid"] for name, p in pods(cluster, namespace, "oom").items()}
    cluster.end_pod(namespace, "oom-worker-1", 137, reason="OOMKilled")
    wait_until(lambda: len(running_pods(cluster, namespace, "oom", attempt=1)) == 3, what="attempt 2's three pods")
    wait_state(cluster, namespace, "oom", "Running")
    after = {name: p["metadata"]["uid"] for name, p in pods(cluster, namespace, "oom").items()}
    assert sorted(after) == sorted(before) and not set(after.values()) & set(before.values())
    status = get_job(cluster, namespace, "oom")["status"]
    assert (status["attempt"], status["restartCount"]) == (1, 1)
    assert status["attempts"][0]["outcome"] == "worker-1 was OOMKilled (exit code 137)"
    assert env_of(pods(cluster, namespace, "oom")["oom-master-0"])["TORCHJOB_ATTEMPT"] == "1"
    # Prometheus sees it too: the restart by its cause, and how long detecting and recovering took.
    wait_until(lambda: scraped(operator, "torchjob_recovery_seconds_count") >= 1, what="a recovery in /metrics")
    assert scraped(operator, "torchjob_job_restarts_total", cause="OOMKilled") >= 1
    assert scraped(operator, "torchjob_failure_detection_seconds_count") >= 1
    assert scraped(operator, "torchjob_reconcile_duration_seconds_count") >= 1
    assert scraped(operator, "torchjob_api_requests_total", verb="create") >= 6


def scraped(operator: OperatorProcess, name: str, **labels: str) -> float:
    """The value of one sample of the operator's /metrics, parsed as Prometheus parses it (0 when absent)."""
    for family in text_string_to_metric_families(operator.prometheus()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def test_a_pod_deleted_by_hand_restarts_the_whole_group_without_counting(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    start(cluster, namespace, job_manifest("gone"))
    # Not --wait: the operator recreates gone-worker-0 (attempt 2) so quickly that kubectl, which waits on the
    # name, can find the successor and wait on it until its own timeout.
    cluster.kubectl("delete", "-n", namespace, "pod", "gone-worker-0", "--wait=false")
    wait_until(lambda: len(running_pods(cluster, namespace, "gone", attempt=1)) == 3, what="attempt 2's three pods")
    status = get_job(cluster, namespace, "gone")["status"]
    assert (status["attempt"], status["restartCount"]) == (1, 0)
    assert status["attempts"][0]["outcome"] == "worker-0 vanished while the group was running (its Pod was deleted)"


def test_backoff_limit_is_enforced(cluster: Cluster, namespace: str, operator: OperatorProcess) -> None:
    start(cluster, namespace, job_manifest("flaky", workers=1, run_policy={"backoffLimit": 1}), replicas=2)
    cluster.end_pod(namespace, "flaky-worker-0", 137)
    wait_until(lambda: len(running_pods(cluster, namespace, "flaky", attempt=1)) == 2, what="the second attempt")
    cluster.end_pod(namespace, "flaky-worker-0", 137)
    wait_state(cluster, namespace, "flaky", "Failed")
    failed = condition(cluster, namespace, "flaky", "Failed")
    assert failed is not None and "backoff limit (1 restarts)" in failed["message"]


def test_active_deadline_is_enforced_by_a_timer_without_any_other_event(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    cluster.apply(job_manifest("slow", workers=1, run_policy={"activeDeadlineSeconds": 3}), namespace)
    wait_state(cluster, namespace, "slow", "Failed", timeout=60)
    assert condition(cluster, namespace, "slow", "Created") is not None  # it did start: the deadline ended it
    failed = condition(cluster, namespace, "slow", "Failed")
    assert failed is not None and "deadline (3s)" in failed["message"]


def test_operator_killed_mid_job_restarts_without_duplicate_pods(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    cluster.apply(job_manifest("big", workers=12), namespace)
    operator.kill()  # probably in the middle of creating the 13 pods
    operator.start()
    wait_until(lambda: len(running_pods(cluster, namespace, "big")) == 13, what="13 running pods")
    wait_state(cluster, namespace, "big", "Running")
    operator.kill()
    cluster.end_pod(namespace, "big-worker-3", 137)  # happens while no operator is watching
    operator.start()
    wait_until(lambda: len(running_pods(cluster, namespace, "big", attempt=1)) == 13, what="attempt 2's 13 pods")
    all_pods = cluster.kubectl_json("get", "-n", namespace, "pods")["items"]
    names = [p["metadata"]["name"] for p in all_pods if not p["metadata"].get("deletionTimestamp")]
    assert len(names) == 13 and len(set(names)) == 13
    status = get_job(cluster, namespace, "big")["status"]
    assert (status["attempt"], status["restartCount"]) == (1, 1)


def test_suspend_removes_the_pods_and_resume_brings_them_back(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    start(cluster, namespace, job_manifest("pause", workers=1), replicas=2)
    cluster.kubectl(
        "patch", "-n", namespace, "pytorchjob", "pause", "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":true}}}'
    )
    wait_state(cluster, namespace, "pause", "Suspended")
    wait_until(lambda: not pods(cluster, namespace, "pause"), what="the suspended job's pods to go")
    cluster.kubectl(
        "patch",
        "-n",
        namespace,
        "pytorchjob",
        "pause",
        "--type=merge",
        "-p",
        '{"spec":{"runPolicy":{"suspend":false}}}',
    )
    wait_until(lambda: len(running_pods(cluster, namespace, "pause", attempt=1)) == 2, what="the resumed job's pods")
    wait_state(cluster, namespace, "pause", "Running")
    suspended = next(
        c for c in get_job(cluster, namespace, "pause")["status"]["conditions"] if c["type"] == "Suspended"
    )
    assert (suspended["status"], suspended["reason"]) == ("False", "PyTorchJobResumed")


def test_a_job_managed_by_another_controller_is_left_alone(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    cluster.apply(job_manifest("theirs", workers=1, run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}), namespace)
    start(cluster, namespace, job_manifest("ours", workers=1), replicas=2)  # proof the operator has looked by now
    assert pods(cluster, namespace, "theirs") == {}
    assert not get_job(cluster, namespace, "theirs").get("status")


def test_invalid_jobs_are_rejected_with_a_clear_message(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    two_masters = job_manifest("twomasters")
    two_masters["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(two_masters), check=False)
    assert refused.returncode != 0
    assert "pytorchReplicaSpecs.Master.replicas: must be exactly 1" in refused.stderr

    no_pytorch = job_manifest("nopytorch", workers=1)
    for spec in no_pytorch["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["name"] = "trainer"
    cluster.apply(no_pytorch, namespace)
    wait_state(cluster, namespace, "nopytorch", "Failed")
    failed = condition(cluster, namespace, "nopytorch", "Failed")
    assert failed is not None and "is invalid" in failed["message"] and "pytorch" in failed["message"]
    assert pods(cluster, namespace, "nopytorch") == {}


def test_the_operator_keeps_working_across_an_api_server_restart(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    start(cluster, namespace, job_manifest("survivor", workers=1), replicas=2)
    cluster.restart_process("kube-apiserver")
    cluster.end_pod(namespace, "survivor-master-0", 0)
    wait_state(cluster, namespace, "survivor", "Succeeded", timeout=90)
    assert operator.process is not None and operator.process.poll() is None


def test_a_job_whose_pods_cannot_be_placed_says_the_schedulers_reason(
    cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    """A Kubeflow-style job that asks for a GPU on a cluster with none: never a bare Created."""
    manifest = job_manifest("gpu", workers=1)
    for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    cluster.apply(manifest, namespace)

    def created_message() -> str:
        found = condition(cluster, namespace, "gpu", "Created")
        return str(found["message"]) if found else ""

    wait_until(lambda: "Insufficient nvidia.com/gpu" in created_message(), what="the scheduler's reason")
    assert "Waiting on master-0: 0/2 nodes are available" in created_message(), created_message()
    assert state(cluster, namespace, "gpu") == "Created"
    # The nodes advertise GPUs (kube-rig create --fake-gpus does this): the same job schedules and runs.
    try:
        for node in cluster.nodes:
            advertise(cluster, node.name, GPU, 1)
        wait_state(cluster, namespace, "gpu", "Running", timeout=120)
    finally:
        for node in cluster.nodes:
            advertise(cluster, node.name, GPU, 0)
