"""The tables of the benchmarks run on a cluster: the operator at scale (kwok), the real node, node loss, and
Kubeflow Trainer v2 beside torchjob."""

from __future__ import annotations

from bench.report import Row, Table
from bench.tables.figures import KUBEFLOW, at_most, over
from bench.tables.headline import (
    APPLY_RUNNING,
    EVICTED,
    NODE_LOSS,
    POD_WARM_RESTART,
    SCALE,
    running_against_indexed_jobs,
)

SCALE_TABLE = Table(
    "scale",
    "The operator at scale (simulated nodes)",
    (
        SCALE,
        Row(
            "API requests per job until Running, the operator's own count",
            "scale",
            "{requests per job:.1f} (create {requests per job, create:.1f}, get {requests per job, get:.1f}, list "
            "{requests per job, list:.1f}, patch {requests per job, patch:.1f})",
            "",
            "≤ 20",
            at_most("requests per job", 20),
        ),
        Row(
            "the leading operator's peak RSS with 100 jobs (MB)",
            "scale",
            "{operator peak RSS:.0f}",
            "",
            "< 150",
            at_most("operator peak RSS", 150),
        ),
        running_against_indexed_jobs(
            "one PyTorchJob of 1,024 replicas → all Pods Running, on 64 simulated nodes",
            "wide",
            "indexed job all running",
            "the same Pods as one Indexed Job",
            "≤ 1.5× the Indexed Job",
        ),
        Row(
            "API requests per replica of the 1,024 until Running, the operator's own count",
            "wide",
            "{requests per replica:.2f} (create {requests per replica, create:.2f}, patch "
            "{requests per replica, patch:.2f})",
            "",
            "≤ 3",
            at_most("requests per replica", 3),
        ),
        Row(
            "the leading operator's peak RSS with a job of 1,024 replicas (MB)",
            "wide",
            "{operator peak RSS:.0f}",
            "",
            "< 250",
            at_most("operator peak RSS", 250),
        ),
        running_against_indexed_jobs(
            "100 PyTorchJobs of 32 replicas at once → all 3,200 Pods Running, on 64 simulated nodes",
            "wide-jobs",
            "indexed jobs all running",
            "the same Pods as 100 Indexed Jobs",
            "≤ 1.5× the Indexed Jobs",
        ),
        Row(
            "… API requests per replica of the 3,200 until Running, the operator's own count; its peak RSS (MB)",
            "wide-jobs",
            "{requests per replica:.2f} (create {requests per replica, create:.2f}, patch "
            "{requests per replica, patch:.2f}); {operator peak RSS:.0f} MB",
            "",
            "≤ 3; < 250 MB",
            lambda cases: cases["requests per replica"].value <= 3 and cases["operator peak RSS"].value < 250,
        ),
        Row(
            "1,024 replicas reporting every second over TLS with Pod tokens: reports taken per second (failed)",
            "wide",
            "**{reports taken per second:.0f}** ({reports failed per second:.1f} failed)",
            "",
            "≥ 1,000, none failed",
            lambda cases: (
                cases["reports taken per second"].value >= 1000 and cases["reports failed per second"].value == 0
            ),
        ),
        Row(
            "… a report's latency, median / 99th percentile; the operator's CPU (the load generator's)",
            "wide",
            "{report latency p50:.3f} s / {report latency p99:.3f} s; {operator CPU under reports:.2f} cores "
            "({load generator CPU:.2f})",
            "",
            "",
        ),
        Row(
            "… one replica frozen: the job's status names it, seconds after its silence threshold (10 s)",
            "wide",
            "**{frozen replica named after its threshold:.2f} s** ({frozen replica named after its threshold.got} of "
            "{frozen replica named after its threshold.n})",
            "",
            "≤ 1.0 s",
            at_most("frozen replica named after its threshold", 1.0),
        ),
        Row(
            "… one of the 64 nodes vanishes (its replicas silent, its Lease renewed): the job decides, seconds after",
            "wide",
            "**{vanished node decided:.2f} s** ({vanished node decided.got} of {vanished node decided.n})",
            "",
            "≤ 2 s",
            at_most("vanished node decided", 2.0),
        ),
        Row(
            "… the leading operator's peak RSS (MB), the reports' connections kept",
            "wide",
            "{operator peak RSS under reports:.0f}",
            "",
            "< 250",
            at_most("operator peak RSS under reports", 250),
        ),
    ),
)

REAL_NODE = Table(
    "real-node",
    "One real node, beside Kubeflow's training-operator",
    (
        APPLY_RUNNING,
        Row(
            "`kubectl apply` → Succeeded, one epoch",
            "real-node",
            "{torchjob succeeded:.1f s}",
            f"{{kubeflow succeeded:.1f s}}, {KUBEFLOW}",
            ratio=over("torchjob succeeded", "kubeflow succeeded"),
        ),
        POD_WARM_RESTART,
        Row(
            "… steps the plain script lost (it keeps no checkpoint)",
            "real-node",
            "{torchjob steps lost:.0f}",
            "{kubeflow steps lost:.0f}",
        ),
        Row(
            "the in-place MNIST job (one warm spare Pod), worker-1's process SIGKILLed in epoch 2 → first step of the "
            "repaired group (→ re-formed)",
            "real-node",
            "**{in place kill first step:.2f s}** ({in place kill re-formed:.2f s}; {in place kill first step.got} "
            "of {in place kill first step.n} in place), the survivors' Pods untouched",
            f"{KUBEFLOW}: no in-place repair (the row above)",
            "≤ 1.0 s",
            at_most("in place kill first step", 1.0),
        ),
        EVICTED,
        Row(
            "… the same job, worker-1 frozen by SIGSTOP → first step of the repaired group",
            "real-node",
            "{in place frozen first step:.2f s} ({in place frozen first step.got} of {in place frozen first step.n})",
            "",
            "≤ 2.5 s",
            at_most("in place frozen first step", 2.5),
        ),
        *(
            Row(
                f"behaviour: {label}",
                "real-node",
                f"{{torchjob behaviour, {label}.text}}",
                f"{{kubeflow behaviour, {label}.text}}",
            )
            for label in (
                "ExitCode, Worker exits 1",
                "ExitCode, Worker SIGKILLed (137)",
                "OnFailure crash loop, backoffLimit 2",
            )
        ),
    ),
    columns=("torchjob operator (in the cluster)", f"{KUBEFLOW}, the same run"),
)

NODE_LOSS_TABLE = Table(
    "node-loss",
    "A node of three vanishes",
    (
        NODE_LOSS,
        Row(
            "… where a group restart's time went: the loss declared / the new master started / its first step "
            "(s after the stop)",
            "node-loss",
            "cold {cold declared:.1f} / {cold started:.1f} / {cold resumed:.1f}; warm {warm declared:.1f} / "
            "{warm started:.1f} / {warm resumed:.1f}",
        ),
        Row(
            "… every sample, node stopped → first step (s)",
            "node-loss",
            "in place {in place first step.samples:.2f}; warm {warm first step.samples:.1f}; cold "
            "{cold first step.samples:.1f}",
            "{kubeflow first step.samples:.1f}",
        ),
        Row(
            "… jobs that Succeeded (1 each)",
            "node-loss",
            "in place {in place succeeded.samples:.0f}; warm {warm succeeded.samples:.0f}; cold "
            "{cold succeeded.samples:.0f}",
            "{kubeflow succeeded.samples:.0f}",
        ),
    ),
    columns=("torchjob operator (in the cluster)", f"{KUBEFLOW}, the same run"),
)

TRAINER = "Kubeflow Trainer v2.2.0 + JobSet v0.11.1"
TRAINER_V2 = Table(
    "trainer-v2",
    "A TrainJob under Kubeflow Trainer v2 and under torchjob",
    (
        Row(
            "rank 1's process SIGKILLed, unchanged script → its first step after",
            "trainer-v2",
            "{torchjob kill first step:.1f s}, a group restart (outcome: {torchjob kill outcome.text})",
            "{trainer kill first step:.1f s}, containers restart in place (outcome: {trainer kill outcome.text})",
            ratio=over("torchjob kill first step", "trainer kill first step"),
        ),
        Row(
            "the same job written for in-place repair, one spare, 3 nodes: rank 2's process SIGKILLed → first step "
            "of the repaired group",
            "trainer-v2",
            "**{torchjob in place first step:.1f s}**, the survivors keep running",
            "no in-place repair: every node restarts",
        ),
        Row(
            "the script exits 2 on every node: what `Failed` says, and when",
            "trainer-v2",
            "{torchjob crash.text}",
            "{trainer crash.text}",
        ),
        Row(
            "`kubectl apply` → both Pods Running / → Complete, one epoch (s)",
            "trainer-v2",
            "{torchjob running:.1f} / {torchjob complete:.1f}",
            "{trainer running:.1f} / {trainer complete:.1f}",
        ),
        Row(
            "… with the kill, three epochs: `kubectl apply` → Complete (s)",
            "trainer-v2",
            "{torchjob kill complete:.1f}",
            "{trainer kill complete:.1f}",
        ),
    ),
    columns=("torchjob operator (in the cluster)", f"{TRAINER}, the same run"),
    judged=False,
)
