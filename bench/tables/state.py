"""The tables of the real-size state benchmarks: the GPT example's ~110M parameters repaired in place beside
torchft, restarted from DCP beside torchrun, and the 1B case."""

from __future__ import annotations

from bench.report import Row, Table
from bench.tables.figures import Figure, over

WHAT = {"": "shard", "fsdp ": "shard", "ddp ": "state"}  # what each layout's joiner receives


def beyond_a_step(prefix: str) -> Figure:
    """A layout's kill → first step in place, less its steady step: the repair's cost beyond redoing the step."""
    return lambda cases: cases[f"{prefix}in place first step"].value - cases[f"{prefix}in place steady step"].value


def floor(prefix: str) -> Figure:
    return lambda cases: cases[f"{prefix}lost {WHAT[prefix]} floor"].value


def floor_row(layout: str, prefix: str) -> Row:
    """#51's in-place target for one layout: the repair's cost beyond a step ≤ its lost state's floor + 0.5 s."""
    beyond, lost = beyond_a_step(prefix), floor(prefix)
    return Row(
        f"the same kill {layout} → the repaired group's first step, beyond one steady step, against the floor: its "
        "lost state sent here rank to rank in one message (gloo, loopback)",
        "state",
        f"**{{beyond:.2f s}}** ({{{prefix}in place first step:.2f s}} less a steady step of "
        f"{{{prefix}in place steady step:.2f s}}; the group whole again at {{{prefix}in place group whole:.2f s}})",
        f"floor {{floor:.2f s}} for the {{{prefix}lost {WHAT[prefix]}:.2f}} GB",
        "≤ floor + 0.5 s",
        lambda cases: beyond(cases) <= lost(cases) + 0.5,
        derived={"beyond": beyond, "floor": lost},
        also=(f"{prefix}lost {WHAT[prefix]} floor",),
        ratio=lambda cases: beyond(cases) / (lost(cases) + 0.5),
    )


STATE = Table(
    "state",
    "Real-size state: a sharded model's checkpoint (4 ranks on 2 cores)",
    (
        Row(
            "training blocked by a DCP checkpoint of the GPT example (110M parameters, FSDP2 over 4 ranks, with "
            "AdamW's state)",
            "state",
            "**{async blocked save:.2f} s** asynchronous, {state size:.2f} GB (committed {async committed save:.1f} s "
            "after)",
            "{sync save:.1f} s synchronous",
            "≤ 0.1× synchronous",
            lambda cases: over("async blocked save", "sync save")(cases) <= 0.1,
            ratio=over("async blocked save", "sync save"),
        ),
        Row(
            "a rank of the same model SIGKILLed → the group whole again, the replacement holding the lost state "
            "(HSDP: 2 replica groups of 2 ranks, a warm spare)",
            "state",
            "**{in place group whole:.2f s}** in place: rank 1 sends the joiner the lost shard from its replica's "
            "memory, {lost shard:.2f} GB of weights and AdamW's moments (timed to the group's first collective after "
            "the re-form, which every member reaches once it holds its state; rank 0's own re-form done at "
            "{in place rank 0 re-formed:.2f s}); training again at {in place first step:.2f s} (the repaired group's "
            "first step)",
            "torchft 0.2.0 (4 replica groups, whole copies): the replacement's first step {torchft replacement:.1f s} "
            "(it held the lost state from {torchft replacement healed:.1f s}: its heal loaded)",
            "≤ 0.1× torchft's replacement",
            lambda cases: over("in place group whole", "torchft replacement")(cases) <= 0.1,
            ratio=over("in place group whole", "torchft replacement"),
        ),
        Row(
            "the same kill under plain FSDP over the 4 ranks (no replica: a copy of each rank's shard in its "
            "neighbour's memory, stepped there with the rank's gradients every step; a warm spare) → the replacement "
            "holding the lost state",
            "state",
            "**{fsdp in place group whole:.2f s}** in place: the lost shard ({fsdp lost shard:.2f} GB) from its "
            "neighbour's copy (rank 0's re-form done at {fsdp in place rank 0 re-formed:.2f s}); training again at "
            "{fsdp in place first step:.2f s}",
            "torchft's replacement {torchft replacement:.1f s} (healed {torchft replacement healed:.1f s})",
            "≤ 0.1× torchft's replacement",
            lambda cases: over("fsdp in place group whole", "torchft replacement")(cases) <= 0.1,
            ratio=over("fsdp in place group whole", "torchft replacement"),
        ),
        Row(
            "the same kill under DDP (nothing sharded: every rank holds the whole model and AdamW's state, as each of "
            "torchft's groups does; a warm spare) → the replacement holding the lost state",
            "state",
            "**{ddp in place group whole:.2f s}** in place: the whole state ({ddp lost state:.2f} GB) from the 3 "
            "survivors at once (rank 0's re-form done at {ddp in place rank 0 re-formed:.2f s}); training again at "
            "{ddp in place first step:.2f s}",
            "torchft's replacement {torchft replacement:.1f s} (healed {torchft replacement healed:.1f s})",
            "≤ 0.1× torchft's replacement",
            lambda cases: over("ddp in place group whole", "torchft replacement")(cases) <= 0.1,
            ratio=over("ddp in place group whole", "torchft replacement"),
        ),
        floor_row("(HSDP)", ""),
        floor_row("under plain FSDP", "fsdp "),
        floor_row("under DDP", "ddp "),
        Row(
            "the same kill → the survivors' next step without it",
            "state",
            "**{in place first step:.2f s}** (a fixed group's survivors wait for the spare)",
            "torchft's survivors {torchft survivors in a new quorum:.2f s}, in a quorum formed after the kill (the "
            "step in flight committed at {torchft next commit:.2f s})",
            "≤ torchft's + 0.05 s",
            lambda cases: cases["in place first step"].value <= cases["torchft survivors in a new quorum"].value + 0.05,
            ratio=over("in place first step", "torchft survivors in a new quorum"),
        ),
        Row(
            "a step of the same model, steady, before the kill (the same global batch)",
            "state",
            "**{in place steady step:.2f s}** (HSDP over 4 ranks, each block gathered once a step)",
            "torchft {torchft steady step:.2f s} (a quorum and a whole model's all-reduce per step)",
            "≤ torchft's (throughput ≥ torchft's)",
            lambda cases: over("in place steady step", "torchft steady step")(cases) <= 1.0,
            ratio=over("in place steady step", "torchft steady step"),
        ),
        Row(
            "the same kill under DDP → the survivors' next step without it",
            "state",
            "**{ddp in place first step:.2f s}** (they wait for the spare)",
            "torchft's survivors {torchft survivors in a new quorum:.2f s}",
            "≤ torchft's + 0.05 s",
            lambda cases: (
                cases["ddp in place first step"].value <= cases["torchft survivors in a new quorum"].value + 0.05
            ),
            ratio=over("ddp in place first step", "torchft survivors in a new quorum"),
        ),
        Row(
            "a step, steady, under DDP (the same layout as torchft's: a whole copy on every rank)",
            "state",
            "**{ddp in place steady step:.2f s}** (DDP over 4 ranks, its gradients all-reduced in buckets during the "
            "backward and kept in them: `gradient_as_bucket_view`; largest rank's peak memory "
            "{ddp in place peak:.0f} MB)",
            "torchft {torchft steady step:.2f s}",
            "≤ torchft's (throughput ≥ torchft's)",
            lambda cases: over("ddp in place steady step", "torchft steady step")(cases) <= 1.0,
            ratio=over("ddp in place steady step", "torchft steady step"),
        ),
        Row(
            "the largest rank's peak memory (RSS high-water mark) under plain FSDP with the neighbours' copies, "
            "before the kill",
            "state",
            "**{fsdp in place peak:.0f} MB** (HSDP in place: {in place peak:.0f} MB)",
            "{fsdp plain peak:.0f} MB, the plain example after as many steps (FSDP, no copies)",
            "≤ 1.5× plain FSDP",
            lambda cases: over("fsdp in place peak", "fsdp plain peak")(cases) <= 1.5,
            ratio=over("fsdp in place peak", "fsdp plain peak"),
            above="more memory",
        ),
        Row(
            "a step, steady, under plain FSDP with the neighbours' copies (the copies kept every step included)",
            "state",
            "**{fsdp in place steady step:.2f s}** (FSDP over 4 ranks; each rank's gradients sent to its neighbour, "
            "which steps its copy with them: {of plain step:.2f}× the plain example's step)",
            "torchft {torchft steady step:.2f s}",
            "≤ torchft's (throughput ≥ torchft's)",
            lambda cases: over("fsdp in place steady step", "torchft steady step")(cases) <= 1.0,
            derived={"of plain step": over("fsdp in place steady step", "fsdp plain steady step")},
            also=("fsdp plain steady step",),
            ratio=over("fsdp in place steady step", "torchft steady step"),
        ),
        Row(
            "a step, steady, of the plain example: FSDP over the same 4 ranks, no copies, no spare (what plain FSDP "
            "costs here, before anything torchjob adds)",
            "state",
            "{fsdp plain steady step:.2f s} (two all-gathers of every block a step, and a reduce-scatter)",
            "torchft {torchft steady step:.2f s} (one all-reduce)",
            ratio=over("fsdp plain steady step", "torchft steady step"),
        ),
        Row(
            "the same, each block's gathered weights kept from its forward to its backward "
            "(`--reshard-after-forward no`: one all-gather a step, not two)",
            "state",
            "**{fsdp gathered steady step:.2f s}** (largest rank's peak memory {fsdp gathered peak:.0f} MB: "
            "{of plain:.2f}× the plain example's, which frees them)",
            "torchft {torchft steady step:.2f s}",
            "≤ torchft's (throughput ≥ torchft's)",
            lambda cases: over("fsdp gathered steady step", "torchft steady step")(cases) <= 1.0,
            derived={"of plain": over("fsdp gathered peak", "fsdp plain peak")},
            also=("fsdp gathered peak", "fsdp plain peak"),
            ratio=over("fsdp gathered steady step", "torchft steady step"),
        ),
    ),
    ratios=True,
)

STATE_RESTART = Table(
    "state-restart",
    "Real-size state, restarted from its DCP checkpoint (4 ranks on 2 cores)",
    (
        Row(
            "a rank of the GPT example SIGKILLed (110M parameters, plain FSDP over 4 ranks, an asynchronous DCP "
            "checkpoint every 3 steps) → the whole group's first step after it, resumed from the checkpoint",
            "state-restart",
            "**{warm restart first step:.2f s}** warm group restart ({warm restart outcome.text})",
            "torchrun `--max-restarts 1`: {torchrun restart first step:.2f s} ({torchrun restart outcome.text})",
            ratio=over("warm restart first step", "torchrun restart first step"),
        ),
    ),
    judged=False,
    ratios=True,
)

STATE_LARGE = Table(
    "state-1b",
    "Real-size state at ~1B parameters: what fits on this 24 GB machine (4 ranks on 2 cores)",
    (
        Row(
            "a rank of the GPT example's 1b size SIGKILLed (plain FSDP over 4 ranks, right after the synchronous DCP "
            "checkpoint of step 2) → the whole group's first step after it, resumed from the checkpoint",
            "state-1b",
            "**{1b warm restart first step:.0f} s** warm group restart, {1b parameters:.2f}B parameters "
            "({1b warm restart outcome.text})",
            "torchrun `--max-restarts 1`: {1b torchrun restart first step:.0f} s ({1b torchrun restart outcome.text})",
            ratio=over("1b warm restart first step", "1b torchrun restart first step"),
        ),
        Row(
            "a step of the same model, steady (1 × 32 tokens per rank)",
            "state-1b",
            "**{1b warm restart steady step:.0f} s** under `torchjob run`",
            "{1b torchrun restart steady step:.0f} s under torchrun, the same script",
            ratio=over("1b warm restart steady step", "1b torchrun restart steady step"),
        ),
        Row(
            "training blocked by its synchronous DCP checkpoint (weights and AdamW's moments)",
            "state-1b",
            "**{1b warm restart sync save:.1f} s** under `torchjob run`, {1b checkpoint size:.1f} GB",
            "{1b torchrun restart sync save:.1f} s under torchrun",
            ratio=over("1b warm restart sync save", "1b torchrun restart sync save"),
        ),
        Row(
            "the largest rank's peak memory (RSS high-water mark), before the kill",
            "state-1b",
            "**{1b warm restart peak:.0f} MB** under `torchjob run`",
            "{1b torchrun restart peak:.0f} MB under torchrun",
            ratio=over("1b warm restart peak", "1b torchrun restart peak"),
            above="more memory",
        ),
        Row(
            "what does not fit beside it, not measured: the model state each would need (all ranks)",
            "state-1b",
            "against this machine's {machine memory:.1f} GB: in place from peers' memory: HSDP (2 replica groups) "
            "{1b hsdp needs:.0f} GB; plain FSDP with a neighbour's copy of each shard {1b fsdp with copies needs:.0f} "
            "GB; DDP {1b ddp needs:.0f} GB. An asynchronous save's staged copy: {1b async save needs:.0f} GB",
            "torchft 0.2.0: a whole copy per replica group, {1b torchft needs:.0f} GB for its fewest (2); plain FSDP, "
            "measured above: {1b fsdp needs:.1f} GB",
        ),
    ),
    judged=False,
    ratios=True,
    notes="A rank's peak is its quarter of the weights, gradients and moments (plain FSDP's figure in the last row), "
    "its process, gathers and allocator on top; what is said not to fit needs at least a second copy of the state.",
)
