"""The pure planner: from (job, observed replicas, now) to actions and the job's new status. No I/O, no clock.

Import from the submodules (``torchjob.core.planning``, ``.actions``, ...): this package imports nothing itself,
so a light reader such as `torchjob list` can use ``torchjob.core.times`` without loading the models.
"""
