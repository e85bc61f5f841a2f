"""The operator's view of nodes (backends/kubernetes/nodes.py): Pods kept off a silent node, replacements that
prefer other nodes, the nodes worth probing, and deletions no kubelet will confirm finished by force."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from torchjob.api.types import ReplicaType
from torchjob.core.observed import SilentNode
from torchjob.testing import make_job


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
    from torchjob.core.reported import Progress

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
    from torchjob.core.reported import MemberAnnouncement, Progress

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

        def try_again(self, names: Any) -> None:
            pass

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


def test_a_leader_that_began_while_a_node_was_gone_probes_it_once_it_reports_again() -> None:
    """An operator that takes the lead while a node is gone cannot reach it, and tries a node it never reached only a
    minute later. When that node comes back and vanishes again within the minute (seen on three nodes: a test ran
    just after another had stopped the same node), its loss must still be known by the probe at once, not only when
    its Lease is overdue: a hung member waits for that verdict (``in_place.awaits_node_loss``)."""
    from datetime import timedelta

    from torchjob.backends.kubernetes.nodes import NodeReader
    from torchjob.backends.kubernetes.reachability import Address, Reachability
    from torchjob.core.reported import Progress

    now = datetime.now(timezone.utc)
    renewals = {"n1": now - timedelta(seconds=60)}
    answering: set[Address] = set()  # n1's kubelet port answers nothing: the node is gone

    class Api:
        def get(self, kind: type[Any], name: str, namespace: str | None = None) -> dict[str, Any]:
            if kind.__name__ == "Lease":
                return {"spec": {"renewTime": renewals[name].isoformat(), "leaseDurationSeconds": 40}}
            addresses = [{"type": "InternalIP", "address": "10.0.0.1"}]
            return {"metadata": {"name": name}, "status": {"addresses": addresses}}

    reader = NodeReader(Api(), lambda _verb: None)  # type: ignore[arg-type]
    reader.reach = Reachability(reader.reach.read_node, lambda address, _timeout: address in answering)
    pod = {"metadata": {"name": "w"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    quiet = Progress(now - timedelta(seconds=30), 12, alive_at=now - timedelta(seconds=30))
    _, silent = reader.for_pods([pod], lambda _pod: quiet)
    assert list(silent) == ["n1"] and not silent["n1"].unreachable  # its Lease says so; the probe cannot
    renewals["n1"] = datetime.now(timezone.utc) + timedelta(seconds=1)  # it comes back: its kubelet renews
    answering.add(("10.0.0.1", 10250))
    beating = Progress(datetime.now(timezone.utc), 13, alive_at=datetime.now(timezone.utc))
    reader.for_pods([pod], lambda _pod: beating)  # it reports again: tried at the next pass
    reader.for_pods([pod], lambda _pod: beating)
    assert "n1" not in reader.avoided
    answering.clear()  # it vanishes again, its Lease renewed a moment ago
    _, silent = reader.for_pods([pod], lambda _pod: quiet)
    assert list(silent) == ["n1"] and silent["n1"].unreachable


def test_what_would_hold_a_job_up_for_good_is_observed_as_stuck_and_stuck_helpers_are_left_out() -> None:
    from torchjob.backends.kubernetes.nodes import KEPT_OFF
    from torchjob.backends.kubernetes.stuck_pods import find_stuck

    def pod(name: str, node: str, role: str | None = None, **extra: Any) -> dict[str, Any]:
        labels = {"torchjob.io/role": role} if role else {}
        return {"metadata": {"name": name, "labels": labels, **extra}, "spec": {"nodeName": node}, "status": {}}

    silent = {"n3": SilentNode("n3", datetime.now(timezone.utc))}
    replica = pod("job-worker-0", "n1")
    store = pod("job-rdzv", "n3", "rendezvous-store")  # on a node that stopped reporting
    spare = pod("job-spare-0-0", "", "spare", annotations={KEPT_OFF: "n2"})  # kept off n2, which reports again
    spare["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "reason": "Unschedulable"}]}
    going = pod("job-worker-1", "n3", deletionTimestamp="2026-01-01T00:00:00Z")  # deleted, its kubelet gone
    lost_spare = pod("job-spare-0-1", "n3", "spare")  # still Running as far as the API server knows
    stuck, left = find_stuck([replica, store, spare, going, lost_spare], silent, silent, "job-rdzv")
    assert sorted((s.name, s.left_out, s.why) for s in stuck) == [
        ("job-rdzv", True, "the rendezvous store's node stopped reporting"),
        ("job-spare-0-0", True, "it was kept off a node that reports again, and fits nowhere else"),
        ("job-spare-0-1", True, "the spare's node stopped reporting: it can take no place"),  # never given a place
        ("job-worker-1", False, "its deletion was decided and its node stopped reporting"),  # observed until gone
    ]
    assert left == [replica, going]
    # A spare on a node that reports is a spare.
    assert find_stuck([pod("job-spare-0-1", "n1", "spare")], silent, silent, "job-rdzv")[0] == []
    # A replica on a silent node is no stuck Pod: the planner decides about replicas (node_loss).
    assert find_stuck([pod("job-master-0", "n3")], silent, silent, "job-rdzv") == ([], [pod("job-master-0", "n3")])
