"""The Kubernetes test control plane: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
and kwok simulating nodes and pod lifecycles, all as plain processes on loopback.

    tools/kube-rig build              build the binaries into the cache (tools/kube-rig-build.sh)
    tools/kube-rig up [--dir D]       start a rig; prints `export KUBECONFIG=...` on a line of its own
    tools/kube-rig status [--dir D]   is each process alive, is the API server ready
    tools/kube-rig down [--dir D]     stop the processes this rig started (by pid) and remove its files

Security is real: TLS with a generated CA, client-certificate authentication, RBAC, service-account
tokens. Ports are picked free at start, so two rigs on one machine do not collide.

Pods never run code here. kwok moves them Pending → Running; a test ends one by annotating it:
``kwok.torchjob.io/exit-code: "137"`` (optionally ``kwok.torchjob.io/reason: OOMKilled``) → the pod's
container terminates with that code and the pod becomes Failed (Succeeded for 0). Pods owned by a Job
complete on their own. Logs are served through the real ``pods/log`` API by kwok's server from a file
in the CRI log format (see :func:`Rig.serve_logs`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
EXIT_CODE_ANNOTATION = "kwok.torchjob.io/exit-code"
REASON_ANNOTATION = "kwok.torchjob.io/reason"
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def versions() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (TOOLS / "versions.env").read_text().split() if "=" in line)
    return dict(pairs)


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchjob"
    return Path(os.environ.get("TORCHJOB_CACHE") or default)


def bin_dir() -> Path:
    v = versions()
    return cache_dir() / "kube" / f"{v['K8S_VERSION']}-kwok-{v['KWOK_VERSION']}" / "bin"


def kwok_module_dir() -> Path:
    gopath = Path(os.environ.get("GOPATH") or cache_dir() / "gopath")
    return gopath / "pkg" / "mod" / "sigs.k8s.io" / f"kwok@{versions()['KWOK_VERSION']}"


def build() -> Path:
    """Build whatever binary is missing; raise with the build's own output if that fails."""
    result = subprocess.run(["bash", str(TOOLS / "kube-rig-build.sh")], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building the Kubernetes test control plane failed:\n{result.stderr[-4000:]}")
    return bin_dir()


# -- certificates ---------------------------------------------------------------------------------------


_SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")


def _write_key(directory: Path, name: str, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (directory / f"{name}.key").write_bytes(pem)


def issue_certificate(
    directory: Path, name: str, common_name: str, orgs: tuple[str, ...] = (), server_ips: tuple[str, ...] = ()
) -> None:
    """Write ``NAME.crt``/``NAME.key`` signed by the rig's CA (``ca.crt``/``ca.key`` in ``directory``): a
    client certificate, or with ``server_ips`` a serving one for those addresses and the API server's names."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
    )
    if server_ips:
        names: list[x509.GeneralName] = [
            x509.DNSName(n) for n in (*_SERVER_NAMES, _SERVER_NAMES[-1] + ".cluster.local")
        ]
        names += [x509.IPAddress(ipaddress.ip_address(a)) for a in server_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    _write_key(directory, name, key)
    (directory / f"{name}.crt").write_bytes(
        builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    )


def _certificates(directory: Path, address: str) -> None:
    """A CA, the API server's serving cert, client certs per component, and the service-account key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "torchjob-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(directory, "ca", ca_key)
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server_ips = tuple(sorted({"127.0.0.1", "10.0.0.1", address}))
    issue_certificate(directory, "apiserver", "kube-apiserver", server_ips=server_ips)
    issue_certificate(directory, "kwok-server", "kwok-server", server_ips=server_ips)
    issue_certificate(directory, "admin", "kubernetes-admin", ("system:masters",))
    issue_certificate(directory, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
    issue_certificate(directory, "controller-manager", "system:kube-controller-manager")
    issue_certificate(directory, "scheduler", "system:kube-scheduler")
    issue_certificate(directory, "kwok", "kwok-controller", ("system:masters",))
    sa = ec.generate_private_key(ec.SECP256R1())
    _write_key(directory, "sa", sa)
    (directory / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def write_kubeconfig(directory: Path, name: str, server: str) -> Path:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "torchjob-test",
                "cluster": {"server": server, "certificate-authority-data": b64(directory / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "client-certificate-data": b64(directory / f"{name}.crt"),
                    "client-key-data": b64(directory / f"{name}.key"),
                },
            }
        ],
        "contexts": [{"name": "torchjob-test", "context": {"cluster": "torchjob-test", "user": name}}],
        "current-context": "torchjob-test",
    }
    path = directory / f"{name}.kubeconfig"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


# -- processes ------------------------------------------------------------------------------------------


@dataclass
class Process:
    name: str
    pid: int
    started_at: float
    argv: list[str] = field(default_factory=list)


@dataclass
class RigState:
    directory: str
    etcd_data: str
    ports: dict[str, int]
    processes: list[Process] = field(default_factory=list)
    address: str = "127.0.0.1"


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(state: RigState, name: str, argv: list[str]) -> None:
    logs = Path(state.directory) / "logs"
    logs.mkdir(exist_ok=True)
    with open(logs / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    state.processes.append(Process(name, process.pid, time.time(), argv))
    _save(state)


def start_process(directory: Path, name: str, argv: list[str]) -> int:
    """Start one more process that belongs to the rig in ``directory`` (stopped by :func:`down` with the rest,
    in reverse order of starting); its output goes to ``logs/NAME.log``. Returns its pid."""
    state = _load(directory)
    _start(state, name, argv)
    return state.processes[-1].pid


def wait_for(directory: Path, what: str, check: Any, timeout: float) -> None:
    """Poll ``check`` until it is true; fail early, with the log's tail, if one of the rig's processes dies."""
    _wait(what, check, timeout, _load(directory))


def _save(state: RigState) -> None:
    (Path(state.directory) / "state.json").write_text(json.dumps(asdict(state), indent=2))


def _load(directory: Path) -> RigState:
    data = json.loads((directory / "state.json").read_text())
    data["processes"] = [Process(**p) for p in data["processes"]]
    return RigState(**data)


def _alive(process: Process) -> bool:
    try:
        with open(f"/proc/{process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    # Field 22 of /proc/PID/stat is the start time in clock ticks since boot: it tells a reused pid apart.
    boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return fields[0] != "Z" and abs(started - process.started_at) < 5.0


def _wait(what: str, check: Any, timeout: float, state: RigState) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        dead = [p.name for p in state.processes if not _alive(p)]
        if dead:
            log = Path(state.directory) / "logs" / f"{dead[0]}.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"{dead[0]} exited while waiting for {what}; its log ends:\n{tail}")
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what} (logs in {state.directory}/logs)")


# -- the rig --------------------------------------------------------------------------------------------


@dataclass
class Rig:
    directory: Path

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    @property
    def server(self) -> str:
        state = _load(self.directory)
        return f"https://{state.address}:{state.ports['apiserver']}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(bin_dir() / "kubectl"), *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, manifest: dict[str, Any] | str, namespace: str | None = None) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        self.kubectl("apply", *(["-n", namespace] if namespace else []), "-f", "-", input=text)

    def stop_process(self, name: str, timeout: float = 60) -> list[str]:
        """Stop one of the rig's processes (SIGTERM, verified by pid and start time); returns its argv."""
        state = _load(self.directory)
        process = next(p for p in state.processes if p.name == name and _alive(p))
        os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(process) and time.monotonic() < deadline:
            time.sleep(0.1)
        state.processes.remove(process)
        _save(state)
        return process.argv

    def restart_process(self, name: str, timeout: float = 60) -> None:
        """Stop one of the rig's processes (SIGTERM) and start it again as it was (e.g. kube-apiserver)."""
        argv = self.stop_process(name, timeout)
        state = _load(self.directory)
        _start(state, name, argv)
        if name == "kube-apiserver":
            _wait(
                "the API server after its restart",
                lambda: self.kubectl("get", "--raw=/readyz", check=False).returncode == 0,
                timeout,
                state,
            )

    def end_pod(self, namespace: str, pod: str, exit_code: int, reason: str | None = None) -> None:
        """Make a running pod's containers terminate with ``exit_code`` (kwok stage, see module doc)."""
        extra = [f"{REASON_ANNOTATION}={reason}"] if reason else []
        self.kubectl("annotate", "-n", namespace, "pod", pod, f"{EXIT_CODE_ANNOTATION}={exit_code}", *extra)

    def serve_logs(self, namespace: str, pod: str, container: str, lines: list[str], logs_file: Path) -> None:
        """Have kwok's kubelet server answer ``pods/log`` for this container with ``lines`` (followable:
        lines added later with :func:`append_log_lines` reach a ``kubectl logs -f``)."""
        logs_file.write_text("")
        append_log_lines(logs_file, lines)
        self.apply(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"logs": [{"containers": [container], "logsFile": str(logs_file), "follow": True}]},
            }
        )


def append_log_lines(logs_file: Path, lines: list[str]) -> None:
    """Append lines in the CRI log format kwok serves (``<RFC3339Nano> stdout F <line>``)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with open(logs_file, "a") as f:
        f.writelines(f"{stamp} stdout F {line}\n" for line in lines)


def up(
    directory: Path | None = None,
    nodes: int = 2,
    timeout: float = 120,
    address: str = "127.0.0.1",
    extra_args: dict[str, tuple[str, ...]] | None = None,
) -> Rig:
    """Start a control plane whose API server listens on ``address`` (loopback unless a real node, in a
    network namespace of its own, must reach it: tools/real_node.py), with ``nodes`` kwok nodes.
    ``extra_args`` adds flags per component (``{"kube-apiserver": (...)}``)."""
    extra = extra_args or {}
    binaries = bin_dir()
    missing = [
        b
        for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl")
        if not (binaries / b).exists()
    ]
    if missing:
        raise RuntimeError(f"missing binaries {', '.join(missing)} in {binaries}: run `tools/kube-rig build`")
    directory = Path(directory or tempfile.mkdtemp(prefix="torchjob-kube-rig-"))
    directory.mkdir(parents=True, exist_ok=True)
    shm = Path("/dev/shm")
    etcd_data = Path(tempfile.mkdtemp(prefix="torchjob-etcd-", dir=shm if os.access(shm, os.W_OK) else directory))
    ports = {n: free_port() for n in ("etcd", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kwok")}
    state = RigState(str(directory), str(etcd_data), ports, address=address)
    _save(state)
    d = directory
    try:
        _certificates(d, address)
        server = f"https://{address}:{ports['apiserver']}"
        for name in ("admin", "controller-manager", "scheduler", "kwok"):
            write_kubeconfig(d, name, server)

        etcd_url, peer_url = f"http://127.0.0.1:{ports['etcd']}", f"http://127.0.0.1:{ports['etcd_peer']}"
        _start(
            state,
            "etcd",
            [
                str(binaries / "etcd"),
                "--name=rig",
                f"--data-dir={etcd_data}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=rig={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        _wait("etcd", lambda: b"true" in urllib.request.urlopen(etcd_url + "/health", timeout=2).read(), 30, state)

        _start(
            state,
            "kube-apiserver",
            [
                str(binaries / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={address}",
                f"--advertise-address={address}",
                f"--secure-port={ports['apiserver']}",
                f"--cert-dir={d}",
                f"--tls-cert-file={d}/apiserver.crt",
                f"--tls-private-key-file={d}/apiserver.key",
                f"--client-ca-file={d}/ca.crt",
                "--authorization-mode=Node,RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d}/sa.pub",
                f"--service-account-signing-key-file={d}/sa.key",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                f"--kubelet-client-certificate={d}/apiserver-kubelet-client.crt",
                f"--kubelet-client-key={d}/apiserver-kubelet-client.key",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
                "--v=0",
                *extra.get("kube-apiserver", ()),
            ],
        )
        context = ssl.create_default_context(cafile=str(d / "ca.crt"))
        context.load_cert_chain(str(d / "admin.crt"), str(d / "admin.key"))
        _wait(
            "the API server's /readyz",
            lambda: urllib.request.urlopen(server + "/readyz", context=context, timeout=5).read() == b"ok",
            timeout,
            state,
        )

        _start(
            state,
            "kube-controller-manager",
            [
                str(binaries / "kube-controller-manager"),
                *(
                    f"--{k}={d}/controller-manager.kubeconfig"
                    for k in ("kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig")
                ),
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['controller_manager']}",
                f"--service-account-private-key-file={d}/sa.key",
                f"--root-ca-file={d}/ca.crt",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                f"--cluster-signing-cert-file={d}/ca.crt",
                f"--cluster-signing-key-file={d}/ca.key",
                "--v=0",
                *extra.get("kube-controller-manager", ()),
            ],
        )
        _start(
            state,
            "kube-scheduler",
            [
                str(binaries / "kube-scheduler"),
                *(
                    f"--{k}={d}/scheduler.kubeconfig"
                    for k in ("kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig")
                ),
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['scheduler']}",
                "--leader-elect=false",
                "--v=0",
                *extra.get("kube-scheduler", ()),
            ],
        )

        rig = Rig(d)
        crd = kwok_module_dir() / "kustomize" / "crd" / "bases" / "kwok.x-k8s.io_logs.yaml"
        if not crd.exists():
            subprocess.run(
                ["go", "mod", "download", f"sigs.k8s.io/kwok@{versions()['KWOK_VERSION']}"],
                check=True,
                env={**os.environ, "GOPATH": str(kwok_module_dir().parents[3])},
                capture_output=True,
            )
        rig.kubectl("apply", "--server-side", "-f", str(crd))
        (d / "kwok.yaml").write_text(_KWOK_STAGES)
        _start(
            state,
            "kwok",
            [
                str(binaries / "kwok"),
                f"--kubeconfig={d}/kwok.kubeconfig",
                f"--config={d}/kwok.yaml",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
                "--node-ip=127.0.0.1",
                f"--node-port={ports['kwok']}",
                f"--server-address=127.0.0.1:{ports['kwok']}",
                f"--tls-cert-file={d}/kwok-server.crt",
                f"--tls-private-key-file={d}/kwok-server.key",
                "--cidr=10.244.0.0/16",
                "--node-lease-duration-seconds=40",
                "--enable-crds=Logs",
            ],
        )
        for i in range(nodes):
            rig.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": f"kwok-node-{i}",
                        "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                        "labels": {
                            "type": "kwok",
                            "kubernetes.io/hostname": f"kwok-node-{i}",
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                        },
                    },
                }
            )

        def nodes_ready() -> bool:
            items = rig.kubectl_json("get", "nodes")["items"]
            ready = [
                n
                for n in items
                if any(
                    c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", [])
                )
            ]
            return len(ready) == nodes

        def default_service_account() -> bool:
            return rig.kubectl("get", "serviceaccount", "default", check=False).returncode == 0

        _wait(f"{nodes} Ready nodes", nodes_ready, timeout, state)
        _wait("the default service account", default_service_account, timeout, state)
        return rig
    except BaseException:
        down(d)
        raise


def down(directory: Path, keep_files: bool = False) -> None:
    """Stop the processes this rig started (verified by pid and start time), then remove its files."""
    try:
        state = _load(directory)
    except FileNotFoundError:
        return
    live = [p for p in reversed(state.processes) if _alive(p)]
    for process in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in live):
        time.sleep(0.1)
    for process in live:
        if _alive(process):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    shutil.rmtree(state.etcd_data, ignore_errors=True)
    if not keep_files:
        shutil.rmtree(directory, ignore_errors=True)


def status(directory: Path) -> list[str]:
    state = _load(directory)
    lines = [f"{p.name:<24} pid {p.pid:<8} {'running' if _alive(p) else 'NOT RUNNING'}" for p in state.processes]
    lines.append(f"API server               https://{state.address}:{state.ports['apiserver']}")
    return lines


# Pod lifecycle on the fake nodes, in kwok's Stage API. Node stages are kwok's defaults.
_KWOK_STAGES = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-running}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.podIP, operator: DoesNotExist}
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      podIP: {{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}
      conditions:
      {{ range list "Initialized" "Ready" "ContainersReady" "PodScheduled" }}
      - {type: {{ . }}, status: "True", lastTransitionTime: {{ $now | Quote }}}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        started: true
        restartCount: 0
        state: {running: {startedAt: {{ $now | Quote }}}}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-exit-on-annotation}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.phase, operator: In, values: [Running]}
    - {key: '.metadata.annotations["@EXIT_CODE@"]', operator: Exists}
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := index .metadata.annotations "@EXIT_CODE@" }}
      {{ $reason := or (index .metadata.annotations "@REASON@") (ternary "Completed" "Error" (eq $code "0")) }}
      phase: {{ ternary "Succeeded" "Failed" (eq $code "0") }}
      conditions:
      {{ range list "Ready" "ContainersReady" }}
      - {type: {{ . }}, status: "False", lastTransitionTime: {{ $now | Quote }}}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: {{ $code }}
            reason: {{ $reason | Quote }}
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: job-pod-complete}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.phase, operator: In, values: [Running]}
    - {key: '.metadata.ownerReferences.[].kind', operator: In, values: [Job]}
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Succeeded
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-deleted}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: Exists}
  next:
    finalizers: {empty: true}
    delete: true
""".replace("@EXIT_CODE@", EXIT_CODE_ANNOTATION).replace("@REASON@", REASON_ANNOTATION)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kube-rig", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("build", "up", "down", "status"))
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "torchjob-kube-rig",
        help="where the rig keeps its certificates, kubeconfig, logs and pids",
    )
    parser.add_argument("--nodes", type=int, default=2, help="fake nodes to create (up)")
    parser.add_argument("--real-node", action="store_true", help="a real kubelet node instead of kwok's (up)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(TOOLS.parent))  # run as a script: make `tools` importable for the real node
    from tools import real_node

    try:
        if args.command == "build":
            print(f"binaries in {build()}")
        elif args.command == "up":
            if (args.dir / "state.json").exists():
                print(
                    f"kube-rig: a rig already uses {args.dir}; `kube-rig down --dir {args.dir}` first", file=sys.stderr
                )
                return 1
            if args.real_node:
                rig = real_node.up(args.dir).rig
                print(f"kube-rig: API server {rig.server}, node {real_node.NODE_NAME} (kubelet); kubectl and clients:")
            else:
                rig = up(args.dir, nodes=args.nodes)
                print(f"kube-rig: API server {rig.server}, {args.nodes} kwok nodes; kubectl and clients:")
            print(f"export KUBECONFIG={rig.kubeconfig}")
        elif args.command == "down":
            real_node.down(args.dir)  # a kwok-only rig has no node state: then just the control plane
        else:
            print("\n".join(status(args.dir)))
    except (RuntimeError, FileNotFoundError, subprocess.CalledProcessError) as err:
        print(f"kube-rig: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
