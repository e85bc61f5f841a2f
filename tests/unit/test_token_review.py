"""The report token reviewer's cache: a review the API server cannot give again is not a silent Pod.

The API server's answers are scripted (real reviews run in ``tests/kube/test_reports.py``); what is under test
is what the operator believes between them, on a clock the test moves."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from lightkube import ApiError
from lightkube.models.authentication_v1 import TokenReviewStatus, UserInfo

from torchjob import worker_files
from torchjob.backends.kubernetes import token_review
from torchjob.backends.kubernetes.token_review import ApiTokenReviewer, PodIdentity, ReviewUnavailable

POD = PodIdentity("team-a", "mnist-worker-0", "uid-1")
VOUCHED = TokenReviewStatus(
    authenticated=True,
    audiences=[worker_files.REPORT_AUDIENCE],
    user=UserInfo(
        username="system:serviceaccount:team-a:default",
        extra={"authentication.kubernetes.io/pod-name": [POD.name], "authentication.kubernetes.io/pod-uid": [POD.uid]},
    ),
)
REFUSED = TokenReviewStatus(authenticated=False, error="pod not found")
THROTTLED = ApiError(status={"code": 429, "message": "too many requests", "reason": "TooManyRequests"})
TIMED_OUT = httpx.ReadTimeout("the API server did not answer")


@dataclass
class ApiServer:
    """Answers each review with the next of ``answers`` (a status, or an error it raises)."""

    answers: list[TokenReviewStatus | Exception]
    asked: int = 0
    now: float = 1000.0
    reviewer: ApiTokenReviewer = field(init=False)

    def __post_init__(self) -> None:
        self.reviewer = ApiTokenReviewer(self, clock=lambda: self.now)  # type: ignore[arg-type]

    def create(self, body: Any) -> Any:
        assert body.spec.audiences == [worker_files.REPORT_AUDIENCE]
        answer = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        if isinstance(answer, Exception):
            raise answer
        return SimpleNamespace(status=answer)


def test_a_review_is_asked_once_while_fresh() -> None:
    api = ApiServer([VOUCHED])
    assert [api.reviewer.review("token") for _ in range(5)] == [POD] * 5
    assert api.asked == 1
    api.now += token_review.FRESH_SECONDS + 1
    assert api.reviewer.review("token") == POD
    assert api.asked == 2


@pytest.mark.parametrize("failure", [THROTTLED, TIMED_OUT, REFUSED], ids=["throttled", "timed-out", "refused"])
def test_a_review_that_fails_when_it_runs_out_leaves_the_pod_heard(failure: TokenReviewStatus | Exception) -> None:
    """The clean-clone CI's false alarm: a cached review ran out under load, the review failed, and a healthy
    Pod's beats were refused for minutes (the liveness deadline named it hung)."""
    api = ApiServer([VOUCHED, failure])
    assert api.reviewer.review("token") == POD
    api.now += token_review.FRESH_SECONDS + 1
    assert [api.reviewer.review("token") for _ in range(10)] == [POD] * 10
    assert api.asked == 2  # asked again only after a while, not on every report
    api.now += token_review.ASK_AGAIN_SECONDS + 1
    assert api.reviewer.review("token") == POD
    assert api.asked == 3


def test_an_earlier_review_stands_only_so_long() -> None:
    api = ApiServer([VOUCHED, TIMED_OUT])
    assert api.reviewer.review("token") == POD
    api.now += token_review.FRESH_SECONDS + token_review.STANDS_SECONDS + 1
    with pytest.raises(ReviewUnavailable, match="could not review"):
        api.reviewer.review("token")


def test_a_token_never_vouched_for_is_refused_or_unavailable() -> None:
    refused = ApiServer([REFUSED, VOUCHED])
    assert refused.reviewer.review("forged") is None
    assert refused.reviewer.review("forged") is None
    assert refused.asked == 1  # a refusal is kept a little while: a stream of forged reports costs few reviews
    refused.now += token_review.ASK_AGAIN_SECONDS + 1
    assert refused.reviewer.review("forged") == POD  # asked again: it may have been refused under load
    unavailable = ApiServer([THROTTLED, VOUCHED])
    with pytest.raises(ReviewUnavailable):
        unavailable.reviewer.review("token")
    assert unavailable.reviewer.review("token") == POD  # nothing was kept: the next report asks again


def test_tokens_that_are_not_a_pods_report_token_name_no_pod() -> None:
    assert token_review.pod_identity(VOUCHED) == POD
    assert token_review.pod_identity(None) is None
    assert token_review.pod_identity(REFUSED) is None
    other_audience = TokenReviewStatus(
        authenticated=True, audiences=["https://kubernetes.default.svc"], user=VOUCHED.user
    )
    assert token_review.pod_identity(other_audience) is None
    unbound = TokenReviewStatus(
        authenticated=True,
        audiences=[worker_files.REPORT_AUDIENCE],
        user=UserInfo(username="system:serviceaccount:team-a:default", extra={}),
    )
    assert token_review.pod_identity(unbound) is None
