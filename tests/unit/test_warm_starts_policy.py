"""Whether replicas start warm: the job's word, else the platform's default (on locally, off in Pods); in Pods
never for an elastic or an in-place group, which do not keep their Pods across a restart."""

from __future__ import annotations

from torchjob.core.policies import warm_starts
from torchjob.testing import make_job

WARM = "torchjob.io/warm-start"


def test_the_job_says_else_the_platform_default() -> None:
    plain = make_job("j").master().workers(1).build()
    assert warm_starts.local_processes(plain) and not warm_starts.pods(plain)
    asked = make_job("j").master().workers(1).annotate(**{WARM: "true"}).build()
    assert warm_starts.local_processes(asked) and warm_starts.pods(asked)
    refused = make_job("j").master().workers(1).annotate(**{WARM: "false"}).build()
    assert not warm_starts.local_processes(refused) and not warm_starts.pods(refused)


def test_pods_of_elastic_or_in_place_groups_start_cold_even_when_asked() -> None:
    elastic = make_job("e").workers(2).elastic(minReplicas=1, maxReplicas=2).annotate(**{WARM: "true"}).build()
    in_place = make_job("i").master().workers(1).annotate(**{WARM: "true", "torchjob.io/spares": "1"}).build()
    for job in (elastic, in_place):
        assert not warm_starts.pods(job)
        assert warm_starts.local_processes(job)  # locally their replicas still fork from the warm interpreter
