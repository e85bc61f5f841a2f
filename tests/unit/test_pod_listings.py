"""A job's Pods are listed again only when they may have changed: the operator's Pod watch said so, the operator
acted on the job, the watch broke, or the last list is too old. Anything else reuses the last list."""

from __future__ import annotations

from typing import Any

from torchjob.api.types import ReplicaType
from torchjob.backends.kubernetes import mapping
from torchjob.backends.kubernetes.backend import KubernetesBackend
from torchjob.backends.kubernetes.pod_listings import MOST_SECONDS, PodListings
from torchjob.controller.operator import Operator
from torchjob.core.actions import DeleteReplica
from torchjob.core.replicas import ReplicaId
from torchjob.testing import make_job

JOB, OTHER = ("team-a", "mnist"), ("team-a", "resnet")


class Lister:
    """Counts the lists made, each returning a new list of one Pod named after the count."""

    def __init__(self) -> None:
        self.made = 0
        self.during: Any = None  # called while a list is under way

    def __call__(self) -> list[dict[str, Any]]:
        self.made += 1
        if self.during is not None:
            self.during()
        return [{"metadata": {"name": f"pod-{self.made}"}}]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_watch_every_pass_lists() -> None:
    listings, lister = PodListings(), Lister()
    for _ in range(3):
        listings.pods(JOB, lister)
    assert lister.made == 3


def test_a_watched_job_whose_pods_did_not_change_reuses_its_last_list() -> None:
    listings, lister = PodListings(), Lister()
    listings.watching()
    first = listings.pods(JOB, lister)
    assert listings.pods(JOB, lister) is first and lister.made == 1
    listings.changed(OTHER)  # another job's Pods
    assert listings.pods(JOB, lister) is first and lister.made == 1
    listings.changed(JOB)
    assert listings.pods(JOB, lister)[0]["metadata"]["name"] == "pod-2"


def test_a_change_heard_while_listing_makes_the_next_pass_list_again() -> None:
    listings, lister = PodListings(), Lister()
    listings.watching()
    lister.during = lambda: listings.changed(JOB)  # its event may describe a Pod the list already missed
    listings.pods(JOB, lister)
    lister.during = None
    listings.pods(JOB, lister)
    assert lister.made == 2


def test_a_break_of_the_watch_makes_every_pass_list_until_it_runs_again() -> None:
    listings, lister = PodListings(), Lister()
    listings.watching()
    listings.pods(JOB, lister)
    listings.unwatched()
    listings.pods(JOB, lister)
    listings.pods(JOB, lister)
    assert lister.made == 3
    listings.watching()
    listings.pods(JOB, lister)
    listings.pods(JOB, lister)
    assert lister.made == 4


def test_a_list_begun_before_a_break_is_not_kept() -> None:
    listings, lister = PodListings(), Lister()
    listings.watching()

    def broken_and_back() -> None:
        listings.unwatched()
        listings.watching()

    lister.during = broken_and_back
    listings.pods(JOB, lister)
    lister.during = None
    listings.pods(JOB, lister)
    assert lister.made == 2


def test_a_list_past_its_age_is_made_again() -> None:
    clock = Clock()
    listings, lister = PodListings(clock), Lister()
    listings.watching()
    listings.pods(JOB, lister)
    clock.now += MOST_SECONDS - 1
    listings.pods(JOB, lister)
    assert lister.made == 1
    clock.now += 2
    listings.pods(JOB, lister)
    assert lister.made == 2


class Pods:
    """The API server's Pods of one job, counting the lists the backend makes."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods, self.lists, self.deleted = pods, 0, 0

    def list(self, kind: type[Any], namespace: str, labels: dict[str, Any], chunk_size: int | None = None) -> Any:
        self.lists += 1
        return [dict(p) for p in self.pods]

    def delete(self, kind: type[Any], name: str, namespace: str, grace_period: int | None = None) -> None:
        self.deleted += 1


def test_the_backend_lists_again_after_it_acted_on_the_job() -> None:
    job = make_job("mnist").master().workers(1).build()
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"namespace": "team-a", "uid": "u"})})
    master = ReplicaId(ReplicaType.MASTER, 0)
    pod = mapping.pod_manifest(job, master, 0)
    pod["metadata"]["ownerReferences"] = [{"uid": "u"}]
    pod["status"] = {"phase": "Running"}
    client = Pods([pod])
    backend = KubernetesBackend(client)  # type: ignore[arg-type]
    backend.listings.watching()
    for _ in range(2):
        backend.observe(job)
        backend.execute(job, [])
        backend.end_pass()
    assert client.lists == 1
    backend.observe(job)
    backend.execute(job, [DeleteReplica(master, 0, "a group restart")])
    backend.end_pass()
    backend.observe(job)
    assert client.lists == 2 and client.deleted == 1


def test_the_operators_pod_watch_says_which_job_changed() -> None:
    operator = Operator(client=None)  # type: ignore[arg-type]
    lister = Lister()
    operator.backend.listings.pods(JOB, lister)  # before the watch runs: not kept
    pod = {"metadata": {"namespace": "team-a", "name": "mnist-master-0", "labels": {"torchjob.io/job-name": "mnist"}}}
    assert operator._pod_event(pod) == JOB
    operator.backend.listings.pods(JOB, lister)
    operator.backend.listings.pods(JOB, lister)
    assert lister.made == 2
    operator._pod_event(pod)
    operator.backend.listings.pods(JOB, lister)
    assert lister.made == 3


class BrokenWatch:
    """A client whose watch delivers one Pod event, then fails (an API server restart), and the operator stops."""

    def __init__(self, operator: Operator, pod: dict[str, Any]) -> None:
        self.operator, self.pod = operator, pod

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        yield "ADDED", self.pod
        self.operator.stopping.set()
        raise ConnectionError("the API server went away")


def test_a_break_of_the_operators_pod_watch_stops_the_reuse_of_lists() -> None:
    operator = Operator(client=None)  # type: ignore[arg-type]
    pod = {"metadata": {"namespace": "team-a", "name": "mnist-master-0", "labels": {"torchjob.io/job-name": "mnist"}}}
    operator.client = BrokenWatch(operator, pod)  # type: ignore[assignment]
    listings, lister = operator.backend.listings, Lister()
    listings.watching()
    listings.pods(JOB, lister)  # kept while the watch runs
    operator._watch(Any, None, operator._pod_event, None, listings.unwatched)
    assert operator.queue.get() == JOB  # the event still asks for a pass
    listings.pods(JOB, lister)
    listings.pods(JOB, lister)
    assert lister.made == 3  # not reused after the break, until the watch runs again
