"""The headline rows (the README's table and the front page's): each benchmark's one figure a newcomer asks for
first, kept here once and shown again in its benchmark's own table."""

from __future__ import annotations

from bench.report import Row, Table
from bench.tables.figures import KUBEFLOW, added, at_most, over

KILL_IN_PLACE = Row(
    "a rank's process SIGKILLed → first step of the group after it",
    "kill",
    "**{in place first step:.2f s}** in place",
    "{warm restart first step:.2f s} a warm group restart from the checkpoint, {cold restart first step:.2f s} "
    "cold; torchrun `--max-restarts`: {torchrun first step:.2f s} ({torchrun first step.got} of "
    "{torchrun first step.n} recovered)",
    "≤ 0.5 s",
    at_most("in place first step", 0.5),
    ratio=over("in place first step", "warm restart first step"),
)
STOP_IN_PLACE = Row(
    "a rank frozen by SIGSTOP (its peers wait, alive) → first step of the group after it, nothing tuned",
    "hang",
    "**{in place first step:.2f s}** in place",
    "{restart first step:.1f s}: named hung after {restart named hung:.1f s}, the group restarted (gloo alone "
    "waits 30 min)",
    "≤ 2.0 s",
    at_most("in place first step", 2.0),
    ratio=over("in place first step", "restart first step"),
)
EVICTED = Row(
    "a Pod evicted (`kubectl drain`, a spot notice) → first step of the group after it, on a real node",
    "real-node",
    "**{in place evicted first step:.2f s}**, handed to the spare before it goes",
    "{in place kill first step:.2f s} when the same rank is SIGKILLed instead",
    "≤ 1.0 s",
    at_most("in place evicted first step", 1.0),
    ratio=over("in place evicted first step", "in place kill first step"),
)
README_KILL_ADDS = Row(
    "rank 2 SIGKILLed in epoch 3: time added to the README's own job (an unchanged script)",
    "kill",
    "**{warm:.1f s}**, replicas forked warm",
    "{cold:.1f s} started cold; torchrun `--max-restarts`: {torchrun:.1f s}",
    "≤ 3.0 s",
    lambda cases: added("warm restart")(cases) <= 3.0,
    derived={"warm": added("warm restart"), "cold": added("cold restart"), "torchrun": added("torchrun")},
    also=tuple(
        f"{way} job {end}" for way in ("warm restart", "cold restart", "torchrun") for end in ("killed", "clean")
    ),
    ratio=over(added("warm restart"), added("cold restart")),
)
LAUNCH_DDP = Row(
    "`torchjob run` → first DDP step on 3 ranks",
    "launch",
    "**{ddp torchjob:.2f s}**",
    "{ddp torchrun:.2f s} torchrun (each rank imports torch and `torch._dynamo`); bare spawn {ddp bare:.2f s}",
    "≤ 0.5× torchrun",
    lambda cases: over("ddp torchjob", "ddp torchrun")(cases) <= 0.5,
    ratio=over("ddp torchjob", "ddp torchrun"),
)
LAUNCH_COLLECTIVE = Row(
    "`torchjob run` → first collective on 3 ranks, a script the warm interpreter clears (standard library, numpy, "
    "plain torch: no DDP)",
    "launch",
    "**{collective torchjob:.2f s}**",
    "{collective torchrun:.2f s} torchrun; bare spawn {collective bare:.2f s}",
    "≤ 0.5× torchrun",
    lambda cases: over("collective torchjob", "collective torchrun")(cases) <= 0.5,
    ratio=over("collective torchjob", "collective torchrun"),
)
LAUNCH_README = Row(
    "`torchjob run` of the README's job → every rank's first step",
    "launch",
    "**{readme torchjob:.2f s}**",
    "{readme torchrun:.2f s} torchrun, the same script and arguments",
    "≤ 0.5× torchrun",
    lambda cases: over("readme torchjob", "readme torchrun")(cases) <= 0.5,
    ratio=over("readme torchjob", "readme torchrun"),
)
POD_WARM_RESTART = Row(
    "a plain script's process SIGKILLed in a Pod, on a real node → its first step after",
    "real-node",
    '**{torchjob warm kill first step:.1f s}**, restarted warm in its Pod (`torchjob.io/warm-start: "true"`); '
    "{torchjob kill first step:.1f s} without, Pods recreated",
    f"{{kubeflow kill first step:.1f s}}, {KUBEFLOW}: its containers restart in place",
    "≤ 4 s",
    at_most("torchjob warm kill first step", 4.0),
    ratio=over("torchjob warm kill first step", "kubeflow kill first step"),
)
APPLY_RUNNING = Row(
    "`kubectl apply` → every Pod Running, on a real node, the operator in the cluster",
    "real-node",
    "**{torchjob running:.1f s}**",
    f"{{kubeflow running:.1f s}}, {KUBEFLOW}",
    "≤ 1.0× Kubeflow",
    lambda cases: over("torchjob running", "kubeflow running")(cases) <= 1.0,
    ratio=over("torchjob running", "kubeflow running"),
)


def running_against_indexed_jobs(metric: str, benchmark: str, anchor: str, anchor_is: str, target: str) -> Row:
    """Seconds until every Pod of the jobs is Running, against the same Pods run by Kubernetes' Job controller as
    Indexed Jobs (the case ``anchor``, described by ``anchor_is``): met at no more than 1.5× theirs."""
    ratio = over("torchjob all running", anchor)
    return Row(
        metric,
        benchmark,
        "**{torchjob all running:.1f s}**",
        f"{{{anchor}:.1f s}}, {anchor_is} (Kubernetes' own Job controller)",
        target,
        lambda cases: ratio(cases) <= 1.5,
        ratio=ratio,
    )


SCALE = running_against_indexed_jobs(
    "100 jobs × 3 replicas submitted at once → all Pods Running, on simulated (kwok) nodes, the operator in the "
    "cluster (2 replicas)",
    "scale",
    "indexed jobs all running",
    "the same Pods as Indexed Jobs",
    "≤ 1.5× Indexed Jobs",
)
NODE_LOSS = Row(
    "a node of three vanishes mid-training → first step after it",
    "node-loss",
    "**{in place first step:.2f s}** in place (a warm spare on the third node); the README's job "
    "{warm first step:.1f s} with warm restarts, {cold first step:.1f s} recreating its Pods "
    "(cold floor {cold floor:.1f s})",
    f"{{kubeflow first step:.1f s}} ({{kubeflow first step.got}} of {{kubeflow first step.n}} in the "
    f"{{window:.0f s}} window), {KUBEFLOW}: {{kubeflow left on the lost node.text}}",
    "in place ≤ 1.0 s",
    at_most("in place first step", 1.0),
)

HEADLINE = Table(
    "headline",
    "The README's numbers",
    (
        KILL_IN_PLACE,
        STOP_IN_PLACE,
        EVICTED,
        README_KILL_ADDS,
        LAUNCH_DDP,
        LAUNCH_COLLECTIVE,
        LAUNCH_README,
        POD_WARM_RESTART,
        APPLY_RUNNING,
        SCALE,
        NODE_LOSS,
    ),
    judged=False,
    ratios=True,
)

# The README's front page: three numbers, each the headline of one promise (a lost rank, a lost node, the start).
FRONT = Table(
    "front",
    "Three numbers",
    (KILL_IN_PLACE, NODE_LOSS, LAUNCH_README),
    judged=False,
    ratios=True,
)
