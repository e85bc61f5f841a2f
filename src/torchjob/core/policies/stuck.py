"""What nothing else will ever finish, done again on every pass while it is observed.

- A Pod that would hold the job up for good (``observed.StuckPod``: its deletion decided on a silent node, a
  helper kept off a node that reports again, the store or a spare on a silent node) is removed by force, before
  anything else the pass decides: the store is made again under the same name in the same pass, a spare as the
  job's spares are kept (a lost member's place waits for it).
- A replica's stop ordered by an operator that has since lost the lead (``observed.UnorderedStop``) is ordered
  again: its launcher would otherwise run the earlier attempt's trainer beside the group's next attempt.
"""

from __future__ import annotations

from torchjob.core.actions import Action, DeleteStuckPod, ReorderStop
from torchjob.core.observed import Observed


def orders(observed: Observed) -> list[Action]:
    """The forced deletes and repeated stops the observation calls for, in that order."""
    found: list[Action] = [DeleteStuckPod(stuck.name, stuck.why) for stuck in observed.stuck]
    return found + [ReorderStop(lost.replica, lost.attempt) for lost in observed.unordered_stops]
