"""The pure Kubernetes mapping: Pod and Service manifests for a replica, observations from Pod status."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchjob.api.types import PyTorchJob, ReplicaType
from torchjob.backends.kubernetes.crd import crd_manifest, elasticjob_crd_manifest
from torchjob.backends.kubernetes.mapping import pod_manifest, service_manifest
from torchjob.backends.kubernetes.observing import node_in_doubt, node_lost, observe_pod, silent_node
from torchjob.core.observed import Observed, Phase, Platform, SilentNode
from torchjob.core.replicas import ReplicaId
from torchjob.testing import make_job

ROOT = Path(__file__).resolve().parents[2]
WORKER_1 = ReplicaId(ReplicaType.WORKER, 1)


def test_a_workers_pod_follows_the_contract_and_never_restarts_in_place() -> None:
    job = make_job("mnist").master().workers(2).restart_policy("OnFailure").build()
    job.metadata.uid = "uid-1"
    pod = pod_manifest(job, WORKER_1, attempt=2)
    assert pod["metadata"]["name"] == "mnist-worker-1"
    assert pod["metadata"]["labels"] == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": "mnist",
        "torchjob.io/job-name": "mnist",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "1",
        "torchjob.io/attempt": "2",
    }
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "mnist",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert pod["spec"]["restartPolicy"] == "Never"
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["MASTER_ADDR"] == "mnist-master-0" and env["MASTER_PORT"] == "23456"
    assert (env["RANK"], env["WORLD_SIZE"], env["TORCHJOB_ATTEMPT"]) == ("2", "3", "2")
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_a_variable_the_template_sets_wins_over_the_contract() -> None:
    job = make_job("j").workers(1).env(MASTER_PORT="29500").build()
    env = pod_manifest(job, ReplicaId(ReplicaType.WORKER, 0), 0)["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "MASTER_PORT"] == ["29500"]


def test_the_service_is_headless_and_selects_every_attempt_of_its_replica() -> None:
    job = make_job("mnist").master().workers(2).build()
    service = service_manifest(job, WORKER_1)
    assert service["metadata"]["name"] == "mnist-worker-1"
    assert service["spec"]["clusterIP"] == "None"
    assert "torchjob.io/attempt" not in service["spec"]["selector"]
    assert service["spec"]["selector"]["training.kubeflow.org/replica-index"] == "1"
    assert service["spec"]["ports"] == [{"name": "pytorchjob-port", "port": 23456, "targetPort": 23456}]


def pod_status(phase: str, **status: Any) -> dict[str, Any]:
    labels = {
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "1",
        "torchjob.io/attempt": "3",
    }
    return {"metadata": {"name": "j-worker-1", "labels": labels}, "status": {"phase": phase, **status}}


def terminated(code: int, reason: str = "Error", message: str = "") -> dict[str, Any]:
    state = {"exitCode": code, "reason": reason, "message": message, "finishedAt": "2026-01-01T00:00:05Z"}
    return {"containerStatuses": [{"name": "pytorch", "state": {"terminated": state}}]}


@pytest.mark.parametrize(
    ("status", "phase", "exit_code", "reason", "described"),
    [
        (pod_status("Running"), Phase.RUNNING, None, None, None),
        (pod_status("Succeeded", **terminated(0, "Completed")), Phase.SUCCEEDED, 0, None, None),
        (
            pod_status("Failed", **terminated(1, message="Traceback...\nValueError: bad lr\n")),
            Phase.FAILED,
            1,
            None,
            "worker-1 exited with code 1: Traceback... | ValueError: bad lr",
        ),
        (
            pod_status("Failed", **terminated(137, "OOMKilled")),
            Phase.FAILED,
            137,
            "OOMKilled",
            "worker-1 was OOMKilled (exit code 137)",
        ),
        (
            pod_status("Failed", reason="Evicted", message="The node was low on resource: memory."),
            Phase.FAILED,
            None,
            "Evicted",
            "worker-1 was Evicted: The node was low on resource: memory.",
        ),
        (
            pod_status(
                "Failed",
                conditions=[
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                        "lastTransitionTime": "2026-01-01T00:00:01Z",
                    }
                ],
                **terminated(143),
            ),
            Phase.FAILED,
            143,
            "Preempted",
            "worker-1 was preempted",
        ),
    ],
)
def test_observations_from_pod_status(
    status: dict[str, Any], phase: Phase, exit_code: int | None, reason: str | None, described: str | None
) -> None:
    seen = observe_pod(status)
    assert seen is not None
    assert (seen.replica, seen.attempt, seen.phase, seen.exit_code, seen.reason) == (
        WORKER_1,
        3,
        phase,
        exit_code,
        reason,
    )
    if described:
        assert seen.describe().startswith(described)


def test_a_pod_that_succeeded_while_being_deleted_is_stopping() -> None:
    # A member that left its group (evicted, or scaled down) exits 0: that is no success of the job's.
    pod = pod_status("Succeeded", **terminated(0, "Completed"))
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:04Z"
    seen = observe_pod(pod)
    assert seen is not None and seen.phase is Phase.SUCCEEDED and seen.stopping
    assert not observe_pod(pod_status("Succeeded", **terminated(0, "Completed"))).stopping  # type: ignore[union-attr]


def test_a_preemption_notice_is_the_failures_onset() -> None:
    notice = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    seen = observe_pod(pod_status("Running", conditions=[{**notice, "lastTransitionTime": "2026-01-01T00:00:01Z"}]))
    assert seen is not None and seen.disrupted_at is not None and seen.failure_onset == seen.disrupted_at


def test_a_running_pod_on_a_node_that_reports_itself_not_ready_waits_for_it() -> None:
    not_ready = [{"type": "Ready", "status": "False"}]
    pod = pod_status("Running", conditions=not_ready)
    pod["spec"] = {"nodeName": "n1"}
    assert node_in_doubt(pod) == "n1"
    assert node_in_doubt(pod_status("Running", conditions=[{"type": "Ready", "status": "True"}])) is None
    assert node_in_doubt(pod_status("Pending", conditions=not_ready)) is None
    # Its kubelet still reports (its runtime is down, say): it will act on the Pod, so the group waits.
    down = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "lastTransitionTime": "T0"}
    seen = observe_pod(pod, {"metadata": {"name": "n1"}, "status": {"conditions": [down]}})
    assert seen is not None and seen.phase is Phase.RUNNING
    assert seen.message == "node n1 is not ready (KubeletNotReady since T0): waiting for it to return"
    healthy = {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert observe_pod(pod, healthy).message is None  # type: ignore[union-attr]


def test_a_node_stopped_reporting_when_declared_unknown_or_when_its_kubelet_missed_a_lease_renewal() -> None:
    now = datetime(2026, 1, 1, 0, 1, 0, tzinfo=timezone.utc)
    lost = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "lastHeartbeatTime": "2026-01-01T00:00:10Z",
        "lastTransitionTime": "2026-01-01T00:00:26Z",
    }
    declared = {"metadata": {"name": "n1"}, "status": {"conditions": [lost]}}
    assert node_lost(declared) and not node_lost({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    at = datetime(2026, 1, 1, 0, 0, 10, tzinfo=timezone.utc)
    assert silent_node("n1", declared, None, now) == SilentNode("n1", at)  # since it was last heard

    def lease(renewed: str) -> dict[str, Any]:
        return {"spec": {"renewTime": renewed, "leaseDurationSeconds": 40}}  # renewed every 10 s

    assert silent_node("n1", None, lease("2026-01-01T00:00:52.000000Z"), now) is None  # 8 s: on time
    assert silent_node("n1", None, lease("2026-01-01T00:00:48.000000Z"), now) is None  # 12 s: late, not missed
    late = silent_node("n1", None, lease("2026-01-01T00:00:46.000000Z"), now)  # 14 s > 1.25 renewals: missed
    assert late == SilentNode("n1", datetime(2026, 1, 1, 0, 0, 46, tzinfo=timezone.utc))
    assert silent_node("n1", None, {"spec": {}}, now) is None and silent_node("n1", None, None, now) is None
    # A node the operator cannot reach is silent at once, since its kubelet's last renewal.
    unanswered = silent_node("n1", None, lease("2026-01-01T00:00:52.000000Z"), now, unreachable=True)
    assert unanswered == SilentNode("n1", datetime(2026, 1, 1, 0, 0, 52, tzinfo=timezone.utc), unreachable=True)


@pytest.mark.parametrize("phase", ["Running", "Unknown"])
@pytest.mark.parametrize("deleted", [False, True])
def test_a_pod_on_a_silent_node_still_runs_as_far_as_anyone_knows(phase: str, deleted: bool) -> None:
    pod = pod_status(phase, conditions=[{"type": "Ready", "status": "False"}])
    pod["spec"] = {"nodeName": "n1"}
    if deleted:  # deleted before the node was declared lost: it stays Terminating
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    assert node_in_doubt(pod) == "n1"
    silent = SilentNode("n1", datetime(2026, 1, 1, 0, 0, 10, tzinfo=timezone.utc))
    seen = observe_pod(pod, None, silent)
    assert seen is not None
    # Whether it is lost is the planner's call (policies/node_loss.py), with a witness of its own.
    assert (seen.phase, seen.reason, seen.stopping, seen.silent_node) == (Phase.RUNNING, None, deleted, silent)


def test_a_pod_without_replica_labels_is_not_a_replica() -> None:
    assert observe_pod({"metadata": {"name": "x", "labels": {}}, "status": {"phase": "Running"}}) is None


def test_the_shipped_crds_are_the_generated_ones_and_the_helm_chart_ships_the_same() -> None:
    deploy = ROOT / "deploy"
    assert yaml.safe_load((deploy / "crd.yaml").read_text()) == crd_manifest()
    assert yaml.safe_load((deploy / "elasticjob-crd.yaml").read_text()) == elasticjob_crd_manifest()
    for shipped, charted in (("crd", "pytorchjobs"), ("trainer-crds", "trainer"), ("elasticjob-crd", "elasticjobs")):
        assert (deploy / "chart" / "crds" / f"{charted}.yaml").read_text() == (deploy / f"{shipped}.yaml").read_text()


def test_the_operator_role_is_least_privilege() -> None:
    documents = list(yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()))
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("secrets", "get") not in granted and ("pods", "update") not in granted
    # Secrets: in its own namespace, and only the report endpoint's one may be read or changed.
    tls = next(d for d in documents if d["kind"] == "Role" and d["metadata"]["name"] == "torchjob-operator-report-tls")
    assert tls["metadata"]["namespace"] == "torchjob-system"
    readers = [rule for rule in tls["rules"] if {"get", "update"} & set(rule["verbs"])]
    assert readers and all(rule.get("resourceNames") == ["torchjob-report-tls"] for rule in readers)


def test_elastic_c10d_jobs_meet_at_torchjobs_store_pod_unless_they_name_a_host() -> None:
    from datetime import datetime, timezone

    from torchjob.backends.kubernetes import mapping as kube
    from torchjob.core.actions import CreateReplica
    from torchjob.core.planning import plan

    def at_store(job: PyTorchJob) -> set[bool]:
        """The planner's decision, as it tells a cluster backend (which reaches a host the job names)."""
        actions = plan(
            job, Observed([]), Platform(reaches_rdzv_host=True), datetime(2026, 1, 1, tzinfo=timezone.utc)
        ).actions
        return {a.rendezvous_at_store for a in actions if isinstance(a, CreateReplica)}

    job = make_job("el").workers(2).elastic(minReplicas=1, maxReplicas=3).build()
    assert at_store(job) == {True}
    where = kube.addressing(job, attempt=2, at_store=True)
    assert (where.rdzv_host, where.rdzv_port, where.rdzv_id) == ("el-rdzv", 29400, "el-2")
    assert where.rdzv_conf_defaults == (("is_host", "false"),)
    pod = kube.store_pod_manifest(job)
    assert pod["metadata"]["labels"]["torchjob.io/role"] == "rendezvous-store"
    assert observe_pod(pod) is None  # never mistaken for a replica
    assert pod["spec"]["containers"][0]["command"][-1] == "29400"
    assert kube.store_service_manifest(job)["spec"]["selector"] == pod["metadata"]["labels"]
    own = make_job("el").workers(2).elastic(minReplicas=1, rdzvHost="rdzv.example", rdzvPort=3000).build()
    assert at_store(own) == {False}
    named = kube.addressing(own, 0, at_store=False)
    assert (named.rdzv_host, named.rdzv_port) == ("rdzv.example", 3000)


def test_with_a_report_url_every_container_gets_the_endpoint_and_an_audience_bound_token() -> None:
    from torchjob.backends.kubernetes import mapping as kube

    job = make_job("rep").workers(1).annotate(**{"torchjob.io/auto-report": "false"}).build()
    assert "volumes" not in kube.pod_manifest(job, ReplicaId(ReplicaType.WORKER, 0), 0)["spec"]
    pod = kube.pod_manifest(job, ReplicaId(ReplicaType.WORKER, 0), 0, report_url="http://op.example:8443/")
    (volume,) = pod["spec"]["volumes"]
    token = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert token["audience"] == "torchjob.io/reports" and token["expirationSeconds"] == 3600
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TORCHJOB_REPORT_URL"] == "http://op.example:8443/reports/default/rep"
    assert env["TORCHJOB_REPORT_TOKEN_FILE"] == "/var/run/secrets/torchjob.io/reports/token"
    assert container["volumeMounts"] == [
        {"name": volume["name"], "mountPath": "/var/run/secrets/torchjob.io/reports", "readOnly": True}
    ]


def test_an_attempts_output_is_kept_compressed_within_a_configmaps_limit() -> None:
    from torchjob.backends.kubernetes import log_archive

    job = make_job("arch").master().workers(2).build()
    job.metadata.uid = "u-1"
    logs = {
        "master-0": "first\nsecond\n",
        "worker-0": "".join(f"line {i} {i * 7919 % 1000003}\n" for i in range(60000)),
    }
    kept = log_archive.manifest(job, 3, logs)
    assert kept["metadata"]["name"] == "arch-logs-3"
    assert kept["metadata"]["ownerReferences"][0]["uid"] == "u-1"  # deleted with the job
    assert sum(len(v) for v in kept["binaryData"].values()) <= log_archive.BUDGET_BYTES
    back = log_archive.read(kept)
    assert back["master-0"] == "first\nsecond\n"
    # Over its share: the newest lines are kept, whole.
    assert back["worker-0"].endswith("line 59999 " + str(59999 * 7919 % 1000003) + "\n")
    assert back["worker-0"].startswith("line ") and len(back["worker-0"]) < len(logs["worker-0"])


def test_a_spare_pod_runs_a_workers_template_without_its_place_and_is_never_a_replica() -> None:
    from torchjob.backends.kubernetes import observing, spares

    job = make_job("ip").master().workers(2).annotate(**{"torchjob.io/spares": "1"}).build()
    pod = spares.spare_pod_manifest(job, "ip-spare-0-0", 3, report_url="http://op:8443")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["TORCHJOB_SPARE"] == "ip-spare-0-0" and env["TORCHJOB_ATTEMPT"] == "3"
    assert env["TORCHJOB_STORE"] == "ip-rdzv:29400" and env["TORCHJOB_REPORT_URL"].endswith("/reports/default/ip")
    assert not {"RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHJOB_REPLICA"} & set(env)
    assert not any(name.startswith("PET_") for name in env)
    assert observe_pod(pod) is None and observing.role_of(pod) == "spare"
    promoted = spares.promotion_patch(job, ReplicaId(ReplicaType.WORKER, 1), 3)["metadata"]["labels"]
    assert promoted["torchjob.io/role"] is None and promoted["training.kubeflow.org/replica-index"] == "1"
    labels = {k: v for k, v in {**pod["metadata"]["labels"], **promoted}.items() if v is not None}
    assert observing.replica_of({"metadata": {"labels": labels}}) == (ReplicaId(ReplicaType.WORKER, 1), 3)


def test_while_a_repaired_replica_has_two_pods_the_one_not_going_counts() -> None:
    from dataclasses import replace

    from torchjob.backends.kubernetes.observing import one_per_replica
    from torchjob.testing import failed, running

    lost = replace(failed("worker-1", exit_code=137), stopping=True)
    spare = running("worker-1")
    assert one_per_replica([lost, spare, running("worker-0")]) == [spare, running("worker-0")]
    assert one_per_replica([spare, lost]) == [spare]


def test_an_unschedulable_pod_says_the_schedulers_reason() -> None:
    job = make_job("gpu").master().workers(1).build()
    pod = pod_manifest(job, ReplicaId(ReplicaType.MASTER, 0), 0)
    reason = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available."
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason}],
    }
    seen = observe_pod(pod)
    assert seen is not None and seen.phase is Phase.PENDING and seen.message == reason


def test_scripts_that_never_import_torchjob_report_through_a_user_site_the_pod_mounts(tmp_path: Path) -> None:
    """The boot files, laid out as the kubelet mounts the ConfigMap, start torchjob.autoreport in a Python run
    with PYTHONUSERBASE pointing there; PYTHONPATH stays the image's own."""
    import subprocess
    import sys

    from torchjob.backends.kubernetes import autoreport_boot
    from torchjob.backends.kubernetes import mapping as kube

    job = make_job("plain").workers(1).build()
    job.metadata.uid = "u-2"
    template = job.spec.pytorch_replica_specs[ReplicaType.WORKER].template
    template["spec"]["containers"].append(
        {"name": "sidecar", "image": "x", "env": [{"name": "PYTHONUSERBASE", "value": "/u"}]}
    )
    pod = kube.pod_manifest(job, ReplicaId(ReplicaType.WORKER, 0), 0, report_url="http://op.example:8443/")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == autoreport_boot.VOLUME)
    assert volume["configMap"]["name"] == "plain-autoreport"
    trainer, sidecar = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["PYTHONUSERBASE"] == autoreport_boot.MOUNT and env["TORCHJOB_AUTOREPORT"] == "1"
    assert "PYTHONPATH" not in env
    assert {e["name"]: e["value"] for e in sidecar["env"]}["PYTHONUSERBASE"] == "/u"  # its own: left alone
    # Lay the ConfigMap out as the kubelet would, and start Python as the container would.
    data = autoreport_boot.config_map(job, kube.owner_reference(job))["data"]
    for item in volume["configMap"]["items"]:
        target = tmp_path / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data[item["key"]])
    run_env = {"PATH": "/usr/bin:/bin", "PYTHONUSERBASE": str(tmp_path), "TORCHJOB_AUTOREPORT": "1"}
    run_env |= {"TORCHJOB_REPLICA": "worker-0", "RANK": "1", "TORCHJOB_OUTPUT_DIR": str(tmp_path / "out")}
    clean = [sys.executable, "-I", "-c", "import sys; print(sys.base_prefix)"]
    base = subprocess.run(clean, capture_output=True, text=True, check=True).stdout.strip()
    python = f"{base}/bin/python3"  # outside any virtual environment, which would close the user site

    def probe(code: str, **env: str) -> list[str]:
        ran = subprocess.run([python, "-c", code], env={**run_env, **env}, capture_output=True, text=True, check=True)
        return ran.stdout.split()

    boot = "import sys; boot = sys.modules['_torchjob_autoreport_boot']; "
    # An image without torchjob: the reporter runs, and `import torchjob` fails as it would without the operator.
    without = boot + "print(boot._reporter is not None, 'torchjob' in sys.modules, sys.path); import torchjob"
    ran = subprocess.run([python, "-c", without], env=run_env, capture_output=True, text=True)
    started, imported, path = ran.stdout.split(maxsplit=2)
    assert (started, imported) == ("True", "False") and f"'{tmp_path / 'lib'}'" not in path
    assert "No module named 'torchjob'" in ran.stderr
    # An image with its own torchjob (here: this checkout's): the script gets that one, and when it reports
    # through torchjob.train, the stand-down reaches the injected reporter.
    own = str(ROOT / "src")
    with_own = boot + "import torchjob.autoreport as a; a.stand_down(); print(a.__file__, boot._reporter.active)"
    where, active = probe(with_own, PYTHONPATH=own)
    assert where.startswith(own) and active == "False"
    # A replica's other local rank, forked by torchjob.train: the injected reporter is started again under the
    # process's own key (the fork copied the reporter, not its thread).
    forked = "old = boot._reporter; os.environ.update(LOCAL_RANK='1', RANK='3'); a.restart_in_child(); "
    restarted = (
        boot + "import os, torchjob.autoreport as a; " + forked + "print(old.active, boot._reporter.heartbeat.name)"
    )
    assert probe(restarted, PYTHONPATH=own) == ["False", "worker-0-1.json"]
