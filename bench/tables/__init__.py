"""What torchjob publishes of its benchmarks: every table's rows, each a template over the cases of one benchmark's
run (``bench/report.py`` fills them from ``bench/results/``). A row shows one quantity on both sides, measured in
the same run; where torchjob is slower, the row stays and says so.

The README shows ``headline``; ``bench/RESULTS.md`` shows every table, in the order of ``TABLES``; the docs pages
show theirs, each where its page has ``<!-- bench-table: NAME -->``. The tables are kept by family, a module each:
``headline`` (the rows shown first), ``local``, ``width``, ``state`` and ``cluster``; ``figures`` has what their
rows share.
"""

from __future__ import annotations

from bench.report import Table
from bench.tables.cluster import NODE_LOSS_TABLE, REAL_NODE, SCALE_TABLE, TRAINER_V2
from bench.tables.headline import FRONT, HEADLINE
from bench.tables.local import CHECKPOINT, CLI, DASHBOARD, ELASTIC, HANG, HANGS, KILL, LAUNCH, STEADY
from bench.tables.state import STATE, STATE_LARGE, STATE_RESTART
from bench.tables.width import REPAIR_WIDTH, WIDTH

TABLES: tuple[Table, ...] = (
    FRONT,
    HEADLINE,
    LAUNCH,
    KILL,
    WIDTH,
    REPAIR_WIDTH,
    HANG,
    HANGS,
    ELASTIC,
    STEADY,
    CHECKPOINT,
    STATE,
    STATE_RESTART,
    STATE_LARGE,
    CLI,
    DASHBOARD,
    SCALE_TABLE,
    REAL_NODE,
    NODE_LOSS_TABLE,
    TRAINER_V2,
)
