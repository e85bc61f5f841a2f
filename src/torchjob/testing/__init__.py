"""Builders for jobs and observations that tests (and users' own tests) can reuse."""

from torchjob.testing.builders import JobBuilder, failed, make_job, pending, running, succeeded

__all__ = ["JobBuilder", "failed", "make_job", "pending", "running", "succeeded"]
