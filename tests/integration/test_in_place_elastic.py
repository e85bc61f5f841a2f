"""An elastic group under in-place repair on the local backend: a SIGKILLed member leaves at once and the
survivors carry on as a smaller group; the spare started for its place joins when warm, and the group grows
back. Nobody restarts, no sample is lost or trained twice, and every rank ends with the model a fault-free
run computes (the global batch is the same at every size, so the world size does not change the math)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psutil
import pytest
import torch

from tests.support.cli import run_cli
from tests.support.local_runs import IN_PLACE_GLOBAL_BATCH, job_file, job_object, shim_pid, start_run, trained
from tests.support.paths import INTEGRATION_SCRIPTS
from tests.support.waits import wait_until
from torchjob.testing import JobBuilder, make_job

STEPS = 400  # long enough (0.1 s a step) for a cold spare to start and join while the group trains on
WORKERS = ("worker-0", "worker-1", "worker-2")


def elastic_job(name: str, **annotations: str) -> JobBuilder:
    return (
        make_job(name)
        .workers(3)
        .elastic(minReplicas=2, maxReplicas=3)
        .command("python", str(INTEGRATION_SCRIPTS / "in_place_train.py"))
        .env(STEPS=str(STEPS))
        # Elastic and in place, with no idle spare: a lost member leaves, and a spare is started for its place.
        .annotate(**{"torchjob.io/spares": "0", **annotations})
    )


def reference_parameters() -> list[float]:
    """What scripts/in_place_train.py ends with, computed in one process over each step's whole global batch:
    DDP's mean of equal shards' mean gradients is the mean over the whole batch, at any world size."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for number in range(STEPS):
        samples = [number * IN_PLACE_GLOBAL_BATCH + i for i in range(IN_PLACE_GLOBAL_BATCH)]
        x = torch.stack([torch.full((8,), float(s % 5)) for s in samples])
        y = torch.tensor([[float(s % 3)] for s in samples])
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()
    return [float(v) for p in model.parameters() for v in p.detach().double().flatten()]


@pytest.mark.parametrize(
    ("fault", "lost"),
    [
        pytest.param(signal.SIGKILL, "worker-1 was killed by SIGKILL", id="killed"),
        # Frozen: the others block in a collective with it but keep beating; at the progress deadline (60 s: it
        # bounds a loaded start-up too) it is named, stopped at once, and leaves like a lost one.
        pytest.param(
            signal.SIGSTOP,
            "worker-1 stopped responding (hung)",
            id="hung",
            marks=pytest.mark.heavy(
                twin="tests/integration/test_in_place_elastic.py::test_a_lost_member_leaves_at_once_and_its_replacement_joins_when_warm[killed]"
            ),
        ),
    ],
)
def test_a_lost_member_leaves_at_once_and_its_replacement_joins_when_warm(
    tmp_path: Path, torchjob_home: Path, fault: signal.Signals, lost: str
) -> None:
    deadline = {"torchjob.io/progress-deadline-seconds": "60"} if fault is signal.SIGSTOP else {}
    run = start_run(job_file(tmp_path, elastic_job("flex", **deadline)), torchjob_home)
    wait_until(lambda: len(trained(torchjob_home, "flex", "worker-1")) >= 5, what="training")
    survivors = {r: shim_pid(torchjob_home, "flex", r) for r in ("worker-0", "worker-2")}
    psutil.Process(shim_pid(torchjob_home, "flex", "worker-1")).children()[0].send_signal(fault)
    stdout, stderr = run.communicate(timeout=400)
    assert run.returncode == 0, stderr[-3000:]

    assert f"{lost}; the group carries on in place with 2 Worker(s)" in stderr, stderr
    assert "spare-0 joins the running group as worker-1" in stderr
    assert "group repaired in place (generation 1, 2 ranks" in stdout, stdout[-3000:]
    assert "spare spare-0 joins as worker-1 (rank 1 of 3)" in stdout
    assert "group re-formed in place (generation 2, 3 ranks" in stdout
    status = job_object(torchjob_home, "flex")["status"]
    assert (status["attempt"], status["restartCount"], status["membershipChanges"]) == (0, 0, 2), status
    state = json.loads((torchjob_home / "jobs" / "flex" / "local.json").read_text())
    assert {p["replica"]: p["pid"] for p in state["processes"] if p["replica"] in survivors} == survivors
    shown = run_cli("get", "flex", home=torchjob_home).stdout
    assert "Group:     worker-0, worker-1, worker-2 (generation 2, re-formed in place)" in shown, shown
    assert "2 membership changes (not failures)" in shown

    assert_trained_exactly(torchjob_home, generations={0, 1, 2})  # three sizes: 3, then 2, then 3 again


def test_scaling_down_and_up_changes_the_running_group_in_place(tmp_path: Path, torchjob_home: Path) -> None:
    run = start_run(job_file(tmp_path, elastic_job("flex")), torchjob_home)
    wait_until(lambda: len(trained(torchjob_home, "flex", "worker-2")) >= 5, what="training")
    staying = {r: shim_pid(torchjob_home, "flex", r) for r in ("worker-0", "worker-1")}
    assert run_cli("scale", "flex", "--workers", "2", home=torchjob_home).returncode == 0
    wait_until(lambda: membership(torchjob_home).get("members") == ["worker-0", "worker-1"], what="scaled down")
    assert run_cli("scale", "flex", "--workers", "3", home=torchjob_home).returncode == 0
    stdout, stderr = run.communicate(timeout=400)
    assert run.returncode == 0, stderr[-3000:]

    assert "worker-2 leaves: scaled to 2 Worker(s)" in stderr, stderr
    assert "spare-0 joins the running group as worker-2" in stderr
    assert "spare spare-0 joins as worker-2 (rank 2 of 3)" in stdout, stdout[-3000:]
    # Scaled away, worker-2 trained on and left at the group's next step with code 0: no member's step failed.
    assert "worker-2 has no place in the group any more and leaves it" in stdout, stdout[-3000:]
    assert "repaired around a lost peer" not in stdout, stdout[-3000:]
    repairs = (torchjob_home / "jobs" / "flex" / "output" / "repairs.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in repairs] == ["regroup", "regroup"], repairs
    status = job_object(torchjob_home, "flex")["status"]
    assert (status["attempt"], status["restartCount"], status["membershipChanges"]) == (0, 0, 2), status
    state = json.loads((torchjob_home / "jobs" / "flex" / "local.json").read_text())
    assert {p["replica"]: p["pid"] for p in state["processes"] if p["replica"] in staying} == staying
    assert_trained_exactly(torchjob_home, generations={0, 1, 2})


def membership(home: Path) -> dict[str, object]:
    path = home / "jobs" / "flex" / "output" / "membership.json"
    try:
        found: dict[str, object] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found


def assert_trained_exactly(home: Path, generations: set[int]) -> None:
    """Every step's whole global batch was trained by the group that completed it last, at its size then, by
    groups of every generation in ``generations``; every rank ends with a fault-free run's model."""
    newest: dict[int, tuple[int, list[int]]] = {}
    for replica in WORKERS:
        for record in trained(home, "flex", replica):
            step, generation = int(record["step"]), int(record["generation"])  # type: ignore[call-overload]
            kept = newest.get(step)
            if kept is None or generation > kept[0]:
                newest[step] = (generation, [])
            if newest[step][0] == generation:
                newest[step][1].extend(record["samples"])  # type: ignore[arg-type]
    last_step_of: dict[int, int] = {}
    for step, (generation, _) in newest.items():
        last_step_of[generation] = max(step, last_step_of.get(generation, step))
    for step, (generation, samples) in newest.items():
        expected = list(range(step * IN_PLACE_GLOBAL_BATCH, (step + 1) * IN_PLACE_GLOBAL_BATCH))
        if step == last_step_of[generation] and sorted(samples) != expected:
            # As in test_in_place_repair: a member killed after the step's collective, before it wrote its record,
            # trained the step (the others could not have completed it without it) but never said so; the
            # model check below is what shows its samples counted. Never a sample twice or a stranger's.
            assert len(set(samples)) == len(samples) and set(samples) < set(expected), step
            continue
        assert sorted(samples) == expected, step
    assert sorted(newest) == list(range(STEPS))
    assert {g for g, _ in newest.values()} == generations

    reference = reference_parameters()
    for replica in WORKERS:
        final = json.loads((home / "jobs" / "flex" / "output" / f"final-{replica}.json").read_text())
        assert final["parameters"] == pytest.approx(reference, abs=1e-5), replica
