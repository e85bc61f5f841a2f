"""1,024 replicas reporting progress every second to the deployed operator, over its real report channel.

A load generator speaks the protocol as ``torchjob.train`` does in a Pod (``torchjob/reporting.py``): for each of
the job's 1,024 Pods (on kwok nodes, which run nothing) a token the API server issues for that Pod (a TokenRequest
bound to it, with the report audience: what the kubelet projects into a real Pod), then, every second, an HTTPS
POST of a progress report to ``/reports/<namespace>/<job>`` on the replica's kept connection, verified with the CA
the operator gave the Pods (``TORCHJOB_REPORT_CA``, read from a Pod's spec). The generator connects to the leading
operator Pod's address (the host routes to Pod networks), with the report Service's name for TLS: the Service
routes to the leader alone, so this skips only the Service's address translation.

The group behaves as a DDP group does: every replica steps together, once a second; then one replica freezes (its
reports stop) and the others keep beating but step no more (they wait in a collective for it). Measured per trial:
the report latency (each POST, sent to answered) and how many failed, the reports per second the operator took, its
CPU (cores, from its processes' CPU time over the steady window) and the generator's own, the operator's peak RSS;
then the frozen replica's loss: the seconds from its last report until the job's status names it, less its silence
threshold (the liveness deadline, ``torchjob.io/liveness-deadline-seconds``, 10 s by default). Each trial is a new
job in a new namespace, deleted after it.
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lightkube import Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccountToken
from tests.support import operator_pods

from bench import cluster_kit
from bench.records import Run
from kuberig import Cluster
from torchjob import worker_files
from torchjob.api import extensions
from torchjob.core import replicas

PyTorchJobs = create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")

STEADY_SECONDS = 20.0  # the window measured, after WARM_SECONDS of load (the first reports' TokenReviews)
WARM_SECONDS = 10.0
TIMEOUT_SECONDS = 2.0  # the trainers' own (reporting._TIMEOUT_SECONDS)


@dataclass
class Channel:
    """Where and how the job's Pods report: the leader's address, the name its certificate carries, the CA."""

    address: str
    port: int
    server_name: str
    path: str
    context: ssl.SSLContext

    @classmethod
    def of(cls, cluster: Cluster, pod: dict[str, Any]) -> Channel:
        env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}
        url = urlsplit(env[worker_files.ENV_REPORT_URL])
        leading = operator_pods.leader(cluster)
        address = cluster.kubectl_json("get", "pod", "-n", operator_pods.NAMESPACE, leading)["status"]["podIP"]
        context = ssl.create_default_context(cadata=env[worker_files.ENV_REPORT_CA])
        return cls(address, url.port or 443, url.hostname or "", url.path, context)


@dataclass
class Replica:
    name: str
    token: str
    frozen: bool = False
    last_taken: float | None = None  # wall clock when its last report was answered 2xx


@dataclass
class Group:
    """The simulated group's step clock: all step together until a member freezes; then the rest wait."""

    started: float = field(default_factory=time.time)
    step_seconds: float = 1.0
    frozen_at: float | None = None

    def step(self, now: float) -> tuple[int, float]:
        """The current step and when it began."""
        until = self.frozen_at if self.frozen_at is not None else now
        step = int((until - self.started) / self.step_seconds)
        return step, self.started + step * self.step_seconds


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    failed: int = 0

    def reset(self) -> None:
        self.latencies, self.failed = [], 0


class _Connection:
    """A replica's kept connection, as ``torchjob.reporting`` keeps one per process: HTTP/1.1 keep-alive over TLS,
    opened again when the operator closed it."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, token: str, body: bytes) -> int:
        for fresh in (self.streams is None, True):
            if self.streams is None:
                channel = self.channel
                self.streams = await asyncio.open_connection(
                    channel.address, channel.port, ssl=channel.context, server_hostname=channel.server_name
                )
            try:
                return await self._exchange(token, body)
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                self.close()
                if fresh:
                    raise
        raise AssertionError("the second try is on a new connection")

    async def _exchange(self, token: str, body: bytes) -> int:
        assert self.streams is not None
        reader, writer = self.streams
        channel = self.channel
        head = (
            f"POST {channel.path} HTTP/1.1\r\nHost: {channel.server_name}:{channel.port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        status = int((await reader.readline()).split()[1])
        length, closing = 0, False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
            closing |= name.strip().lower() == "connection" and value.strip().lower() == "close"
        await reader.readexactly(length)
        if closing:
            self.close()
        return status

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def _report_forever(channel: Channel, replica: Replica, group: Group, tally: Tally, stop: asyncio.Event) -> None:
    await asyncio.sleep(random.random())  # the Pods' beats are not in phase
    process = f"{replica.name}-0"
    connection = _Connection(channel)
    while not stop.is_set() and not replica.frozen:
        began = time.monotonic()
        now = time.time()
        step, step_began = group.step(now)
        report = {
            worker_files.REPORT_STEP: step,
            worker_files.REPORT_TIME: step_began,
            worker_files.REPORT_ALIVE: now,
            worker_files.REPORT_SECONDS_PER_STEP: group.step_seconds,
            worker_files.REPORT_PROCESS: process,
        }
        try:
            code = await asyncio.wait_for(connection.post(replica.token, json.dumps(report).encode()), TIMEOUT_SECONDS)
        except (OSError, asyncio.TimeoutError, ValueError, IndexError, asyncio.IncompleteReadError):
            connection.close()
            code = 0
        if 200 <= code < 300:
            replica.last_taken = time.time()
            tally.latencies.append(time.monotonic() - began)
        else:
            tally.failed += 1
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
    connection.close()


class Generator:
    """The replicas' reports, from an event loop of its own thread, until ``stop``."""

    def __init__(self, channel: Channel, replicas: list[Replica]) -> None:
        self.channel, self.replicas = channel, replicas
        self.group, self.tally = Group(), Tally()
        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        tasks = [_report_forever(self.channel, r, self.group, self.tally, self._stop) for r in self.replicas]
        await asyncio.gather(*tasks)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)


def issue_tokens(client: Client, namespace: str, pods: list[dict[str, Any]]) -> dict[str, str]:
    """A token for each Pod, bound to it, with the report audience: pod name → token."""
    tokens: dict[str, str] = {}
    for pod in pods:
        meta = pod["metadata"]
        spec = TokenRequestSpec(
            audiences=[worker_files.REPORT_AUDIENCE],
            boundObjectRef=BoundObjectReference(kind="Pod", apiVersion="v1", name=meta["name"], uid=meta["uid"]),
            expirationSeconds=3600,
        )
        account = pod["spec"].get("serviceAccountName") or "default"
        request = ServiceAccountToken(metadata=ObjectMeta(name=account, namespace=namespace), spec=spec)
        issued = client.create(request, name=account, namespace=namespace)
        assert issued.status is not None
        tokens[meta["name"]] = str(issued.status.token)
    return tokens


def replica_pods(cluster: Cluster, namespace: str, job: str, attempt: int) -> list[dict[str, Any]]:
    """The Running replica Pods of ``attempt`` of ``job``."""
    selector = f"{replicas.LABEL_JOB_NAME}={job},{replicas.LABEL_ATTEMPT}={attempt}"
    pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"]
    return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / 100.0


def _named_at(client: Client, namespace: str, job: str, replica: str, deadline: float) -> float | None:
    """Wall clock when the job's status first names ``replica`` as hung; None if not by ``deadline``."""
    while time.time() < deadline:
        found = client.get(PyTorchJobs, job, namespace=namespace)
        status = json.dumps(found.get("status") or {})
        if f"Hung: {replica}" in status:
            return time.time()
        time.sleep(0.05)
    return None


def reporting(
    cluster: Cluster, client: Client, namespace: str, job: dict[str, Any], count: int
) -> tuple[list[dict[str, Any]], list[Replica], Generator]:
    """``job`` (a PyTorchJob of ``count`` replicas) Running in ``namespace``, a new one, and every replica Pod
    reporting from a started generator, warm (the first reports' TokenReviews done): the Pods, and their replicas in
    the same order, and the generator."""
    name = job["metadata"]["name"]
    cluster_kit.seconds_until_running(cluster, namespace, [job], count)
    pods = replica_pods(cluster, namespace, name, 0)
    channel = Channel.of(cluster, pods[0])
    tokens = issue_tokens(client, namespace, pods)
    group = [Replica(p["metadata"]["name"].removeprefix(f"{name}-"), tokens[p["metadata"]["name"]]) for p in pods]
    generator = Generator(channel, group)
    generator.start()
    print(f"  {len(group)} replicas reporting", flush=True)
    time.sleep(WARM_SECONDS)
    return pods, group, generator


def record(run: Run, cluster: Cluster, trials: int, job: dict[str, Any], count: int) -> None:
    """``job`` (a PyTorchJob of ``count`` replicas) under report load, ``trials`` times, each in a new namespace
    deleted after it: the steady load measured, then a replica frozen."""
    name = job["metadata"]["name"]
    client = Client(KubeConfig.from_file(str(cluster.kubeconfig)))
    threshold = float(job["metadata"].get("annotations", {}).get(extensions.LIVENESS_DEADLINE, 0)) or (
        extensions.DEFAULT_LIVENESS_DEADLINE
    )
    leading = operator_pods.leader(cluster)
    pids = cluster.container_pids(operator_pods.NAMESPACE, leading, "operator")
    for trial in range(trials):
        namespace = f"reports-{trial}"
        _, group, generator = reporting(cluster, client, namespace, job, count)
        generator.tally.reset()
        cpu, began, own = _cpu_seconds(pids), time.monotonic(), time.process_time()
        time.sleep(STEADY_SECONDS)
        elapsed, used = time.monotonic() - began, _cpu_seconds(pids) - cpu
        run.keep("load generator CPU", (time.process_time() - own) / elapsed, "cores")
        latencies, failed = list(generator.tally.latencies), generator.tally.failed
        run.keep("report latency p50", statistics.median(latencies) if latencies else None)
        run.keep("report latency p99", _percentile(latencies, 0.99))
        run.keep("reports taken per second", len(latencies) / elapsed, "reports/s")
        run.keep("reports failed per second", failed / elapsed, "reports/s")
        run.keep("operator CPU under reports", used / elapsed, "cores")
        frozen = random.choice([r for r in group if r.name != "master-0"])
        generator.group.frozen_at = time.time()
        frozen.frozen = True
        named = _named_at(client, namespace, name, frozen.name, time.time() + threshold + 60)
        generator.stop()
        last = frozen.last_taken
        late = None if named is None or last is None else named - last - threshold
        run.keep("frozen replica named after its threshold", late)
        p50, p99 = (statistics.median(latencies) if latencies else None), _percentile(latencies, 0.99)
        print(
            f"  trial {trial + 1}: {len(latencies) / elapsed:.0f} reports/s taken, {failed / elapsed:.1f}/s failed, "
            f"p50 {_ms(p50)}, p99 {_ms(p99)}, operator {used / elapsed:.2f} cores "
            f"(generator {run.samples['load generator CPU'][-1] or 0:.2f}); {frozen.name} named "
            + (f"{late:.2f} s after its {threshold:g} s threshold" if late is not None else "never"),
            flush=True,
        )
        cluster_kit.delete_namespace(cluster, namespace)
    run.keep("operator peak RSS under reports", cluster_kit.operator_peak_rss_mb(cluster), "MB")


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"
