"""The pure Kubernetes mapping: Pod and Service manifests for a replica, observations from Pod status."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchjob.api.types import PyTorchJob, ReplicaType
from torchjob.backends.kubernetes.crd import crd_manifest
from torchjob.backends.kubernetes.mapping import pod_manifest, service_manifest
from torchjob.backends.kubernetes.observing import node_in_doubt, node_lost, observe_pod, silent_node
from torchjob.core.observed import Phase, SilentNode
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


def test_the_shipped_crd_is_the_generated_one() -> None:
    assert yaml.safe_load((ROOT / "deploy" / "crd.yaml").read_text()) == crd_manifest()


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
        actions = plan(job, [], datetime(2026, 1, 1, tzinfo=timezone.utc), reaches_rdzv_host=True).actions
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


def test_a_deletion_that_no_kubelet_will_confirm_is_finished_by_force_once_its_grace_is_over() -> None:
    from torchjob.backends.kubernetes.nodes import never_finishing

    def pod(name: str, node: str, deleting: str | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name}
        if deleting:
            metadata["deletionTimestamp"] = deleting
        return {"metadata": metadata, "spec": {"nodeName": node}}

    silent = {"gone": SilentNode("gone", datetime(2026, 1, 1, tzinfo=timezone.utc))}
    pods = [
        pod("lost", "gone", "2026-01-01T00:00:05Z"),  # deleted, grace over, its node silent: force
        pod("soon", "gone", "2099-01-01T00:00:00Z"),  # its grace is not over yet
        pod("alive", "gone", None),  # nobody decided it should go
        pod("elsewhere", "fine", "2026-01-01T00:00:05Z"),  # its kubelet will confirm
    ]
    assert [p["metadata"]["name"] for p in never_finishing(pods, silent)] == ["lost"]


def test_pods_made_while_a_node_is_silent_are_kept_off_it() -> None:
    from torchjob.backends.kubernetes.nodes import avoiding

    # A requirement on a node's field takes one value (the API server refuses more): one per node, ANDed.
    away = [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in ("n1", "n2")]
    assert avoiding({}, ["n2", "n1"])["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": away}]}
    }
    # The job's own terms are ORed: each one gets the constraint, and keeps what it asked for.
    gpu = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}
    cpu = {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}
    spec = {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [gpu, cpu]}}
        }
    }
    terms = avoiding(spec, ["n1", "n2"])["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["matchFields"] for t in terms["nodeSelectorTerms"]] == [away, away]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == gpu["matchExpressions"]
    assert avoiding({"containers": []}, []) == {"containers": []}  # nothing silent: the spec is untouched


def test_what_replaces_a_replica_removed_while_running_prefers_other_nodes() -> None:
    from torchjob.backends.kubernetes import nodes
    from torchjob.backends.kubernetes.nodes import NodeReader

    reader = NodeReader(None, lambda _verb: None)  # type: ignore[arg-type]  # nothing here reads the API
    running = {"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    crashed = {"spec": {"nodeName": "n2"}, "status": {"phase": "Failed"}}  # its node did nothing wrong
    reader.suspect([running, crashed])
    spec: dict[str, Any] = {}
    reader.keep_off_silent({"metadata": {}, "spec": spec})
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    away = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}
    assert preferred == [{"weight": 100, "preference": away}]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["nodeAffinity"]  # never a must
    # A suspect is forgotten after its minute (and the record of it goes, so that it never grows).
    reader.suspects["n1"] -= nodes.SUSPECT_SECONDS
    reader.suspect([])
    assert reader.suspects == {}
    later: dict[str, Any] = {}
    reader.keep_off_silent({"metadata": {}, "spec": later})
    assert "affinity" not in later


def test_the_store_runs_where_the_workers_may_but_does_not_take_part_in_their_spreading() -> None:
    from torchjob.backends.kubernetes import mapping as kube

    job = make_job("el").workers(3).elastic(minReplicas=2, maxReplicas=3).build()
    spread = {"labelSelector": {"matchLabels": {"torchjob.io/job-name": "el"}}, "topologyKey": "kubernetes.io/hostname"}
    where = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}]}
    template = job.spec.pytorch_replica_specs[ReplicaType.WORKER].template
    template["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": where},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [spread]},
    }
    template["spec"]["tolerations"] = [{"key": "spot", "operator": "Exists"}]
    store = kube.store_pod_manifest(job)["spec"]
    assert store["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": where}}
    assert store["tolerations"] == [{"key": "spot", "operator": "Exists"}]


def test_the_node_of_a_replica_just_removed_is_looked_at_for_the_pods_that_never_beat() -> None:
    """The rendezvous store never reports progress, so its node is never quiet on its own account: where a
    replica running beside it was just removed (perhaps lost with the node), that node's Lease is read too."""
    from datetime import timedelta

    from torchjob.backends.kubernetes.nodes import NodeReader

    renewed = (datetime.now(timezone.utc) - timedelta(seconds=30)).isoformat()
    read: list[str] = []

    class Leases:  # the API server's answers: every node's Lease last renewed 30 s ago, Nodes with no address
        def get(self, kind: type[Any], name: str, namespace: str | None = None) -> dict[str, Any]:
            read.append(f"{kind.__name__}/{name}")
            if kind.__name__ == "Lease":
                return {"spec": {"renewTime": renewed, "leaseDurationSeconds": 40}}
            return {"metadata": {"name": name}, "status": {}}

    reader = NodeReader(Leases(), lambda _verb: None)  # type: ignore[arg-type]
    store = {"metadata": {"name": "job-rdzv"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    _, silent = reader.for_pods([store], lambda _pod: None)
    assert silent == {} and "Lease/n1" not in read  # nothing gave a reason to look
    reader.suspect([{"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}])
    _, silent = reader.for_pods([store], lambda _pod: None)
    assert list(silent) == ["n1"] and "Lease/n1" in read


def test_the_node_of_a_replica_never_heard_is_looked_at_once_the_jobs_other_replicas_report() -> None:
    """A replica whose reports never arrive, while its peers' do, is as quiet as one that stopped beating: its
    node is looked at (seen on three nodes: otherwise only the node lifecycle controller, 16 s later, named it).
    Not before any replica of the job reports, and never for a spare or the store, which never beat."""
    from datetime import timedelta

    from torchjob.backends.kubernetes.nodes import NodeReader
    from torchjob.core import replicas
    from torchjob.core.heard import Progress

    now = datetime.now(timezone.utc)
    renewed = (now - timedelta(seconds=30)).isoformat()
    read: list[str] = []

    class Leases:  # every node's Lease last renewed 30 s ago, Nodes with no address
        def get(self, kind: type[Any], name: str, namespace: str | None = None) -> dict[str, Any]:
            read.append(f"{kind.__name__}/{name}")
            if kind.__name__ == "Lease":
                return {"spec": {"renewTime": renewed, "leaseDurationSeconds": 40}}
            return {"metadata": {"name": name}, "status": {}}

    def pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
        running = {"phase": "Running"}
        return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node}, "status": running}

    def replica(kind: str, index: int) -> dict[str, str]:
        return {replicas.LABEL_REPLICA_TYPE: kind, replicas.LABEL_REPLICA_INDEX: str(index)}

    master, worker = pod("m", "n1", replica("master", 0)), pod("w", "n2", replica("worker", 0))
    spare = pod("s", "n3", {replicas.LABEL_ROLE: "spare"})
    beating = Progress(now, 12, alive_at=now)
    reader = NodeReader(Leases(), lambda _verb: None)  # type: ignore[arg-type]
    _, silent = reader.for_pods([master, worker, spare], lambda _pod: None)
    assert silent == {} and not [r for r in read if r.startswith("Lease/")]  # nobody reports yet: starting
    _, silent = reader.for_pods([master, worker, spare], lambda p: beating if p is master else None)
    assert list(silent) == ["n2"] and "Lease/n2" in read
    assert "Lease/n1" not in read and "Lease/n3" not in read


def test_the_node_of_an_in_place_member_that_missed_two_announcements_is_looked_at() -> None:
    """A member announces several times a second: two missed (a few tenths of a second, long before its progress
    beat is overdue) are reason to probe its node, so that a vanished node is known before the floor of a member's
    silence (silent_member)."""
    from datetime import timedelta

    from torchjob.backends.kubernetes.nodes import NodeReader
    from torchjob.core.heard import MemberAnnouncement, Progress

    now = datetime.now(timezone.utc)
    read: list[str] = []

    class Leases:  # every node's Lease fresh, Nodes with no address
        def get(self, kind: type[Any], name: str, namespace: str | None = None) -> dict[str, Any]:
            read.append(f"{kind.__name__}/{name}")
            if kind.__name__ == "Lease":
                return {"spec": {"renewTime": now.isoformat(), "leaseDurationSeconds": 40}}
            return {"metadata": {"name": name}, "status": {}}

    pods = [
        {"metadata": {"name": n}, "spec": {"nodeName": node}, "status": {"phase": "Running"}}
        for n, node in (("m", "n1"), ("w", "n2"))
    ]
    beating = Progress(now, 12, alive_at=now)  # both beat within the second: no progress silence
    heard = {"m": now, "w": now - timedelta(seconds=0.4)}
    said = {n: MemberAnnouncement(attempt=0, heard_at=at, every=0.15) for n, at in heard.items()}
    reader = NodeReader(Leases(), lambda _verb: None)  # type: ignore[arg-type]
    reader.for_pods(pods, lambda _pod: beating)
    assert not [r for r in read if r.startswith("Lease/")]  # not a member: nothing to look at
    reader.for_pods(pods, lambda _pod: beating, lambda p: said[p["metadata"]["name"]])
    assert "Lease/n2" in read and "Lease/n1" not in read


def test_a_spare_kept_off_a_node_that_came_back_is_made_anew_while_the_scheduler_cannot_place_it() -> None:
    """A Pod's spec is fixed once made: a spare (or the store) made while a node was silent stays off it for
    good. Once that node reports again, such a Pod left unschedulable is replaced (``kept_off_needlessly``)."""
    from datetime import timedelta

    from torchjob.backends.kubernetes.nodes import KEPT_OFF, NodeReader, kept_off_needlessly

    went_silent = datetime.now(timezone.utc) - timedelta(seconds=60)
    renewals = {"n2": went_silent - timedelta(seconds=5)}  # n2's kubelet last renewed before it fell silent

    class Leases:
        def get(self, kind: type[Any], name: str, namespace: str | None = None) -> dict[str, Any]:
            return {"spec": {"renewTime": renewals[name].isoformat(), "leaseDurationSeconds": 40}}

    reader = NodeReader(Leases(), lambda _verb: None)  # type: ignore[arg-type]
    reader.avoided["n2"] = SilentNode("n2", went_silent)
    spare: dict[str, Any] = {"metadata": {"name": "job-spare-0-0"}, "spec": {}}
    reader.keep_off_silent(spare)
    assert spare["metadata"]["annotations"][KEPT_OFF] == "n2"
    terms = spare["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]}
    ]
    unplaced = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    spare["status"] = {"phase": "Pending", "conditions": [unplaced]}
    assert not kept_off_needlessly(spare, reader.avoided)  # n2 is still silent: right to keep it off
    renewals["n2"] = datetime.now(timezone.utc)  # n2's kubelet reports again
    reader.for_pods([], lambda _pod: None)  # each pass reads the Leases of the nodes kept off
    fresh: dict[str, Any] = {"metadata": {"name": "job-spare-0-1"}, "spec": {}}
    reader.keep_off_silent(fresh)
    assert "n2" not in reader.avoided and "annotations" not in fresh["metadata"] and fresh["spec"] == {}
    assert kept_off_needlessly(spare, reader.avoided)  # the old one cannot go there: made anew
    placed = {**spare, "spec": {**spare["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}}
    assert not kept_off_needlessly(placed, reader.avoided)  # placed elsewhere meanwhile: it stays


def test_a_node_found_silent_by_the_probe_is_kept_off_until_its_kubelet_renews_its_lease_again() -> None:
    """A node that vanished a second ago has a Lease seconds old, not yet overdue: once its Pods are gone (nothing
    quiet to probe it for), it stays kept off until its kubelet renews the Lease, not until the Lease looks fresh."""
    from datetime import timedelta

    from torchjob.backends.kubernetes.nodes import NodeReader

    renewals = {"n2": datetime.now(timezone.utc) - timedelta(seconds=3)}

    class Leases:
        def get(self, kind: type[Any], name: str, namespace: str | None = None) -> dict[str, Any]:
            return {"spec": {"renewTime": renewals[name].isoformat(), "leaseDurationSeconds": 40}}

    class Probe:  # the operator's probe of the kubelet's port: n2 answers nothing
        def learn(self, names: Any) -> None:
            pass

        def unreachable(self, names: Any) -> set[str]:
            return set(names) & {"n2"}

    reader = NodeReader(Leases(), lambda _verb: None)  # type: ignore[arg-type]
    reader.reach = Probe()  # type: ignore[assignment]
    reader.suspect([{"spec": {"nodeName": "n2"}, "status": {"phase": "Running"}}])
    store = {"metadata": {"name": "job-rdzv"}, "spec": {"nodeName": "n2"}, "status": {"phase": "Running"}}
    _, silent = reader.for_pods([store], lambda _pod: None)
    assert list(silent) == ["n2"] and silent["n2"].unreachable and "n2" in reader.avoided
    reader.suspects.clear()  # its Pods removed: nothing quiet on n2 any more, its Lease still not overdue
    _, silent = reader.for_pods([], lambda _pod: None)
    assert silent == {} and "n2" in reader.avoided
    renewals["n2"] = datetime.now(timezone.utc) + timedelta(seconds=1)  # its kubelet renews: it reports again
    reader.for_pods([], lambda _pod: None)
    assert "n2" not in reader.avoided


def test_what_would_hold_a_job_up_for_good_is_removed_by_force_before_it_is_observed() -> None:
    from torchjob.backends.kubernetes.nodes import KEPT_OFF
    from torchjob.backends.kubernetes.stuck_pods import clear_the_way

    def pod(name: str, node: str, role: str | None = None, **extra: Any) -> dict[str, Any]:
        labels = {"torchjob.io/role": role} if role else {}
        return {"metadata": {"name": name, "labels": labels, **extra}, "spec": {"nodeName": node}, "status": {}}

    silent = {"n3": SilentNode("n3", datetime.now(timezone.utc))}
    replica = pod("job-worker-0", "n1")
    store = pod("job-rdzv", "n3", "rendezvous-store")  # on a node that stopped reporting
    spare = pod("job-spare-0-0", "", "spare", annotations={KEPT_OFF: "n2"})  # kept off n2, which reports again
    spare["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "reason": "Unschedulable"}]}
    going = pod("job-worker-1", "n3", deletionTimestamp="2026-01-01T00:00:00Z")  # deleted, its kubelet gone
    removed: list[str] = []
    left = clear_the_way([replica, store, spare, going], silent, silent, "job-rdzv", removed.append)
    assert sorted(removed) == ["job-rdzv", "job-spare-0-0", "job-worker-1"]
    assert left == [replica, going]  # the one being deleted is still observed (stopping) until it is gone
    # A replica on a silent node stays: the planner decides about replicas (node_loss), never this.
    assert clear_the_way([pod("job-master-0", "n3")], silent, silent, "job-rdzv", removed.append) != []
