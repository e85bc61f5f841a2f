"""Forming one generation of a group under in-place repair (torchjob.train.in_place): meeting at the store
torchjob hosts under the generation's own prefix, waiting for the controller's membership, and a warm spare's
wait for a place.

Every generation uses a fresh store prefix (reusing one hangs), and its members first meet at a store
barrier that gives up as soon as the controller publishes a newer generation: a member that died before the
group formed then costs one more membership, not the whole collective timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import math
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torchjob import worker_files
from torchjob.train import channel, local_ranks, peers, warm_heap
from torchjob.train.channel import Channel
from torchjob.train.context import DistContext
from torchjob.worker_files import Membership

# How long a member may wait for the next generation to form before it says it waits on a silent peer: a warm
# spare given a place arrives well within it (and says so as the member at once); one frozen or lost as it was
# given the place never does, and the controller replaces it once it has been silent long enough. As long as the
# silence a joining member is allowed (core/policies/silent_member.py): until a spare given the place has spoken,
# the member's last word is the lost process's, and a spare slowed by a loaded machine must not be judged by it.
FORMING_ALLOWANCE = 3.0

# How often a spare, and a member of a group under in-place repair, says so again: an announcement lost on the
# way, or heard by a leader whose node then vanished, must not leave a new leader thinking the group cannot be
# repaired in place (it hears only what is sent after it took over).
REANNOUNCE_SECONDS = 5.0

# One try to connect to the store (store_client).
STORE_TRY_SECONDS = 3.0
# How long a kept connection's store has to accept a plain connection before a new one is made (StoreConnection).
STORE_PING_SECONDS = 1.0

# The store key (under a generation's prefix) that counts the members that arrived to form it, and the keys by
# which the members that hold the training state say so (one per rank, under this one).
_ARRIVALS = "torchjob/arrived"
_HOLDS = "torchjob/holds"


def store_client(timeout: timedelta) -> Any:
    """The store torchjob hosts for the job (``TORCHJOB_STORE``): it outlives every trainer, not always its node.

    Connected in short tries, each resolving the name again: a store lost with its node is created again under
    the same name at another address, and one try at the old address (no answer ever, no refusal) would last
    the whole timeout. Once connected, the store's operations get the whole timeout.

    Each try first knocks with a plain socket: torch's client logs every failed connection as an error with a
    C++ stack trace, and while a lost store is replaced a member may try for seconds; its log must say what
    happened, not look like a crash. The last try goes to torch, whose error is raised."""
    host, _, port = os.environ[worker_files.ENV_STORE].rpartition(":")
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        left = deadline - time.monotonic()
        one_try = max(0.1, min(STORE_TRY_SECONDS, left))
        if left > STORE_TRY_SECONDS and not _answers(host, int(port), one_try):
            time.sleep(0.2)
            continue
        try:
            store = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=one_try))  # type: ignore[attr-defined]
        except RuntimeError:  # DistNetworkError, DistStoreError: no store there (any more)
            if left <= STORE_TRY_SECONDS:
                raise
            time.sleep(0.2)
            continue
        store.set_timeout(timeout)
        return store


def _answers(host: str, port: int, timeout: float) -> bool:
    """Whether something accepts a connection at ``host:port`` within ``timeout`` seconds (the name resolved
    afresh: a store created again elsewhere keeps its name)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:  # refused, unreachable, timed out, a name that does not resolve (yet)
        return False


def _resolved(host: str) -> str | None:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return None


class StoreConnection:
    """This process's one connection to the job's store, kept from one generation to the next.

    A process that holds a second connection while a wide group forms was seen stalling the store's answers for
    5 s (16 and 32 ranks here, with either of torch's store servers; never with one connection per process), and
    a new connection per generation is a second one while the last generation's group, failed and not yet
    collected, still holds its own. So the connection is kept, and made again only where it cannot serve: the
    store's name now resolves to another address (the store was lost with its node and created again
    elsewhere), or nothing accepts a connection at its address within ``STORE_PING_SECONDS`` (its node
    vanished, and the name does not resolve elsewhere yet). The check is a plain socket's, with a timeout of its
    own: an operation on a kept connection to a vanished host may not time out as asked."""

    def __init__(self) -> None:
        self._client: Any = None
        self._address: str | None = None

    def for_generation(self, timeout: timedelta) -> Any:
        host, _, port = os.environ[worker_files.ENV_STORE].rpartition(":")
        address = _resolved(host)
        kept = self._client is not None and address is not None and address == self._address
        if kept and _answers(address or host, int(port), STORE_PING_SECONDS):
            return self._client
        self._client = None  # the old connection goes before the new one is made
        self._client, self._address = store_client(timeout), _resolved(host)
        return self._client


CONNECTION = StoreConnection()


def is_newer(found: Membership | None, attempt: int, generation: int) -> bool:
    """Whether ``found`` is a membership of ``attempt`` with a generation above ``generation``."""
    return found is not None and found["attempt"] == attempt and found["generation"] > generation


def wait_for_membership(channel: Channel, attempt: int, newer_than: int, deadline: float) -> Membership | None:
    """The first membership of ``attempt`` with a generation above ``newer_than``; None at the deadline."""
    while time.monotonic() < deadline:
        found = channel.membership()
        if is_newer(found, attempt, newer_than):
            return found
        time.sleep(channel.poll_seconds)
    return None


def absorb_first_ddp() -> None:
    """Build this process's first DDP on a private one-rank group, and drop both.

    In torch 2.15 the first DistributedDataParallel a process builds keeps its process group alive for good
    (seen here: the group outlives destroy_process_group() and gc, while later DDPs release theirs). For the
    group a job trains in, that breaks in-place repair: its sockets never close, so a survivor still blocked
    in a collective with this rank was seen waiting for the full collective timeout after this rank had
    moved on. The private group takes the leak instead; the import of torch._dynamo that the first DDP
    needs (~4 s) happens here, once, too.
    """
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    DistributedDataParallel(nn.Linear(1, 1))
    dist.destroy_process_group()


def freeze_heap() -> None:
    """Collect, then set aside what this process holds now (its imports) from every later collection. A sharded
    model is a reference cycle (FSDP2's hooks hold their modules), so the group a re-form leaves is freed only by
    a full collection (``leave_group``), which holds the GIL while the member joins the next group: 0.17-0.33 s
    here, against 0.01-0.03 s once the process's older objects are set aside. Called before the first model is
    built: a model made after it is collected as before. Not once Triton is loaded (torch._dynamo imports it):
    its bindings (nanobind) list every object of theirs still alive at exit as a leak, and a frozen object is
    never collected (as launch/preload.py freezes torch's core only)."""
    if "triton" in sys.modules:
        return
    gc.collect()
    gc.freeze()


def leave_group(backend: str, rank: int, broken: bool) -> None:
    """Leave the generation's group (the default one), and let go of it in a thread of its own.

    The last reference is what closes its connections, and gloo's destructor waits for its event loop to drop
    each peer in turn: 10-20 ms at 32 ranks for one process alone, 0.3 s when all 32 close at once on 2 cores.
    It releases the GIL while it waits, so the member joins the next generation meanwhile. The caller drops
    its own references first (the DDP reducer, a sharded model's mesh)."""
    held = [dist.distributed_c10d._get_default_group()]
    abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
    if broken and "nccl" in backend and abort is not None:
        abort()  # NCCL: a collective teardown with a dead peer can hang; abort the communicators instead
    else:
        dist.destroy_process_group()

    def close() -> None:
        closed = weakref.ref(held.pop())
        if closed() is not None:
            gc.collect()  # only when refcounting did not free the group (a sharded model's: see freeze_heap)
            if closed() is not None:
                print(f"torchjob: warning: rank {rank} could not close its old group", flush=True)

    closing = threading.Thread(target=close, name="torchjob-close-group", daemon=True)
    _CLOSING[:] = [thread for thread in _CLOSING if thread.is_alive()]
    _CLOSING.append(closing)
    closing.start()


# Old groups still being let go of (leave_group). A process that ends while one is in gloo's destructor dies of
# SIGABRT: Python 3.11 ends a daemon thread that takes the GIL back after finalization began with pthread_exit,
# and the destructor (which gives the GIL up while gloo drops its peers) cannot be unwound. So exit waits for
# them first, for at most CLOSE_AT_EXIT seconds: a daemon thread still, so that a close that never ends cannot
# hold the process forever.
_CLOSING: list[threading.Thread] = []
CLOSE_AT_EXIT = 30.0


def _finish_closing() -> None:
    deadline = time.monotonic() + CLOSE_AT_EXIT
    for thread in _CLOSING:
        thread.join(max(0.0, deadline - time.monotonic()))
    if any(thread.is_alive() for thread in _CLOSING):
        print(f"torchjob: warning: an old group was still closing after {CLOSE_AT_EXIT:.0f} s at exit", flush=True)


atexit.register(_finish_closing)


def generation_store(attempt: int, generation: int, client: Any) -> Any:
    """The store under one generation's own prefix, through ``client``: its barrier, holders and group."""
    return dist.PrefixStore(worker_files.group_prefix(attempt, generation), client)  # type: ignore[attr-defined]


def init_generation(
    backend: str, attempt: int, generation: int, rank: int, world: int, timeout: timedelta, client: Any = None
) -> None:
    """Join one generation of the attempt's group at the store torchjob hosts, under its own prefix, through
    ``client`` (this process's kept connection where not given)."""
    store = generation_store(attempt, generation, client if client is not None else CONNECTION.for_generation(timeout))
    peers.formed()
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def everyone_arrived(
    talk: Channel, found: Membership, world: int, client: Any, timeout: timedelta, holding: int | None = None
) -> bool:
    """Wait, at the store through ``client``, until every process of the generation ``found`` describes
    (``world`` of them) has arrived; False as soon as the controller publishes a newer one instead (a member died
    before it arrived: the repair is redone around it, and waiting in ``init_process_group`` for the dead member
    would last its whole timeout). ``holding``: this process's rank, where it holds the training state (said
    before it counts itself, so that whoever sees everyone arrived sees it too: ``lowest_holder``)."""
    attempt, generation = found["attempt"], found["generation"]
    store = generation_store(attempt, generation, client)
    if holding is not None:
        store.set(f"{_HOLDS}/{holding}", "1")
    store.add(_ARRIVALS, 1)
    deadline = time.monotonic() + timeout.total_seconds()
    asked_at = time.monotonic()
    while store.add(_ARRIVALS, 0) < world:
        now = time.monotonic()
        if now - asked_at >= talk.poll_seconds:
            asked_at = now
            if is_newer(talk.membership(), attempt, generation):
                return False
        if now > deadline:
            raise RuntimeError(f"generation {generation} of the group did not form within {timeout.total_seconds():g}s")
        time.sleep(0.002)
    return True


def lowest_holder(found: Membership, world: int, client: Any) -> int:
    """Once everyone arrived: the lowest rank that said it holds the training state (``world`` where none did).
    A store round trip per rank up to it, usually one (rank 0 is a survivor unless it was the one lost): at 32
    ranks on this 2-core machine, a collective among all of them took 0.05-0.07 s here."""
    store = generation_store(found["attempt"], found["generation"], client)
    return next((rank for rank in range(world) if store.check([f"{_HOLDS}/{rank}"])), world)


class Joined(NamedTuple):
    """A generation this process joined."""

    membership: Membership
    read_at: float  # when the membership was read (wall clock)
    rank: int
    world: int
    holder: int  # the lowest rank that holds the training state (``world``: none does)


def join_next(
    talk: Channel,
    backend: str,
    replica: str,
    attempt: int,
    after: int,
    deadline: float,
    timeout: timedelta,
    replaced_by_joiner: bool = False,
    holds_state: bool = False,
) -> Joined | None:
    """Join, as ``replica``, the newest generation of ``attempt`` above ``after`` that forms (one that a newer
    supersedes before everyone arrived is skipped), saying whether this process ``holds_state``. This rank and
    the world size come from the membership (a replica of several processes holds adjacent ranks:
    local_ranks.py). None when ``replica`` is no longer a member (an elastic group scaled down) or,
    for a running member (``replaced_by_joiner``), when a spare joins in its place (it was handed over).
    ``deadline`` (monotonic) bounds the wait for a membership; ``timeout`` each generation's forming."""
    while True:
        found = wait_for_membership(talk, attempt, after, deadline)
        if found is None:
            raise RuntimeError("the group was not repaired in time: no new membership was published")
        found_at = time.time()
        if replica not in found["members"] or (replaced_by_joiner and replica in found["joined"]):
            return None
        rank, world = local_ranks.place_in(found["members"], replica)
        # One connection for the barrier and the group, kept across generations (StoreConnection).
        client = CONNECTION.for_generation(timeout)
        if everyone_arrived(talk, found, world, client, timeout, rank if holds_state else None):
            holder = lowest_holder(found, world, client)
            init_generation(backend, attempt, found["generation"], rank, world, timeout, client)
            return Joined(found, found_at, rank, world, holder)
        after = found["generation"]


def wait_as_spare(ctx_backend: str, device: torch.device, timeout: timedelta) -> DistContext:
    """Block as a warm spare until the controller gives this process a lost replica's place; then join."""
    freeze_heap()  # as every member does before its first sharded model (before dynamo: see there): paid while waiting
    absorb_first_ddp()  # also imports torch._dynamo, which the first DDP()/Adam() needs (~4 s): paid while waiting
    with contextlib.suppress(ImportError):
        # MetricsLogger's TensorBoard writer: 0.16 s to import, which the group would wait for after the join.
        import torch.utils.tensorboard  # noqa: F401
    spare = os.environ[worker_files.ENV_SPARE]
    attempt = int(os.environ.get(worker_files.ENV_ATTEMPT, "0"))
    talk = channel.from_env()
    speaks = local_ranks.speaks_for_replica()
    announced = -math.inf
    heap = warm_heap.SpareHeap(lambda: _heap_told(attempt, timeout) if os.environ.get(worker_files.ENV_STORE) else None)
    while True:
        if speaks and time.monotonic() - announced >= REANNOUNCE_SECONDS:  # again and again: see REANNOUNCE_SECONDS
            talk.announce(spare, attempt)
            announced = time.monotonic()
        found = talk.membership()
        if found is not None and found["attempt"] == attempt and spare in found["spares"]:
            break
        time.sleep(talk.poll_seconds + heap.warm_a_slice())
    heap.stop()
    replica = found["spares"][spare]
    os.environ[worker_files.ENV_REPLICA] = replica  # from now on this process is that replica (files, logs)
    if speaks:
        # Said at once, as the member it now is: its silence from here on is what the controller judges, not the
        # lost member's last word, nor its own last word as a spare (up to REANNOUNCE_SECONDS old).
        more = {worker_files.ANNOUNCE_EVERY: talk.alive_seconds}
        talk.announce(worker_files.process_key(replica, 0, 0), attempt, more)
    given = found["generation"]
    speaking = _announcing_while_forming(talk, replica, attempt) if speaks else contextlib.nullcontext()
    with speaking:
        joined = join_next(talk, ctx_backend, replica, attempt, given - 1, math.inf, timeout)
    if joined is None:
        raise RuntimeError(f"spare {spare} was given {replica}'s place, but {replica} is no member of the group")
    rank, world, generation = joined.rank, joined.world, joined.membership["generation"]
    print(f"torchjob: spare {spare} joins as {replica} (rank {rank} of {world})", flush=True)
    local_rank = local_ranks.local_rank()
    return DistContext(
        rank,
        local_rank,
        world,
        device,
        ctx_backend,
        "torchjob",
        generation=generation,
        joined=True,
        holder=joined.holder,
        local_world_size=local_ranks.processes_per_replica(),
    )


def _heap_told(attempt: int, timeout: timedelta) -> int | None:
    """The heap size a member said for ``attempt`` (warm_heap.py); None while none has, or while the store does
    not answer (being replaced: a spare must not wait on it)."""
    host, _, port = os.environ[worker_files.ENV_STORE].rpartition(":")
    if not _answers(host, int(port), STORE_PING_SECONDS):
        return None
    return warm_heap.told(CONNECTION.for_generation(timeout), attempt)


@contextlib.contextmanager
def _announcing_while_forming(talk: Channel, replica: str, attempt: int) -> Iterator[None]:
    """A spare given a place announces, while the group forms, as its members' watching threads do: alive, and,
    past ``FORMING_ALLOWANCE``, waiting in the newest generation. Silent, it would be one more quiet member beside
    one that is truly lost, and the controller names a silent member only when it alone is quiet."""
    stop = threading.Event()
    began = time.monotonic()
    key = worker_files.process_key(replica, 0, 0)

    def speak() -> None:
        answered: Membership | None = None  # the last announcement's answer, where the channel gives one
        while not stop.wait(talk.alive_seconds):
            more: dict[str, Any] = {worker_files.ANNOUNCE_EVERY: talk.alive_seconds}
            if time.monotonic() - began > FORMING_ALLOWANCE:
                newest = answered if talk.answers_with_membership else talk.membership()
                if newest is not None and newest["attempt"] == attempt:
                    more[worker_files.ANNOUNCE_WAITING] = newest["generation"]
            answered = talk.announce(key, attempt, more)

    thread = threading.Thread(target=speak, name="torchjob-forming", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class MembershipWatch:
    """The newest generation of the attempt the controller published, read in the background so that a step
    costs no file read or request (an elastic group looks for a new membership at every step)."""

    def __init__(
        self,
        look: Callable[[], Membership | None],
        attempt: int,
        pause: Callable[[], float],
        on_poll: Callable[[int], None] | None = None,
    ) -> None:
        """``look()`` reads the membership (``InPlaceTraining`` announces in the same call where the channel
        answers with it), and ``pause()`` says how long to wait before the next look; ``on_poll(newest_loss)``
        runs in the watching thread after every read, with the newest generation published because members
        were lost (``Membership.lost_in``): ``InPlaceTraining`` uses it to leave a step that waits on a peer the
        controller has replaced."""
        self.newest = -1
        self.newest_loss = -1
        self._look, self._attempt, self._pause, self._on_poll = look, attempt, pause, on_poll
        threading.Thread(target=self._run, name="torchjob-membership", daemon=True).start()

    def _run(self) -> None:
        while True:
            found = self._look()
            if found is not None and found["attempt"] == self._attempt:
                self.newest = max(self.newest, found["generation"])
                self.newest_loss = max(self.newest_loss, found["lost_in"])
            if self._on_poll is not None:
                self._on_poll(self.newest_loss)
            time.sleep(self._pause())
