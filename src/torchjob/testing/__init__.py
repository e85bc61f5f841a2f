"""Builders for jobs and observations, and a fake platform and clock, that tests (and users' own) can reuse."""

from torchjob.testing.builders import JobBuilder, failed, make_job, pending, running, succeeded
from torchjob.testing.fakes import FakeBackend, FakeClock

__all__ = ["FakeBackend", "FakeClock", "JobBuilder", "failed", "make_job", "pending", "running", "succeeded"]
