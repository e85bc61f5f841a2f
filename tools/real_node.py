"""A real Kubernetes node beside the test control plane, where Pods really run their containers.

    tools/kube-rig up --real-node [--dir D]   control plane + one real node; prints `export KUBECONFIG=...`
    tools/kube-rig down [--dir D]             stops the node's Pods and processes, then the control plane

The node is kubelet, Debian's containerd + runc + CNI plugins and a minimal CoreDNS, all in a network and
mount namespace this module creates (``torchjob-node<K>``). A veth pair links it to the host, where the
control plane and a registry listen on ``10.99.<K>.1``; the node is ``10.99.<K>.2``, its Pods
``10.244.0.0/24`` behind the ``cni0`` bridge. Nothing is routed anywhere else: the namespace has no default
route, so test traffic stays on this machine. kubectl, the operator and the tests run on the host.

What this VM kind needs (``notes/REAL_NODE.md``): cgroup v1 only (kubelet ``failCgroupV1: false``,
``cgroupDriver: cgroupfs``); no CAP_SYS_RESOURCE (containerd ``restrict_oom_score_adj``); kubelet's global
sysctls are faked inside the node's mount namespace, so the host keeps its own.

Images: the node's containerd mirrors every registry host to the rig's registry (:mod:`oci_images` pushes
there), so Pods keep their image names and pull policies. The Python environment comes from the node, as a
GPU node provides its driver: containerd mounts this checkout's site-packages (torch, numpy) read-only at
``/opt/torchjob/site-packages`` in every container; the test images (Debian + python3) put that on their
path. A multi-GB torch layer per image would cost minutes of tarring and unpacking per run for no more truth.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import kube_rig, oci_images

NODE_NAME = "real-node"
POD_SUBNET = "10.244.0.0/24"
POD_GATEWAY = "10.244.0.1"
RUNTIME_MOUNT = "/opt/torchjob/site-packages"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CGROUP_ROOT = Path("/sys/fs/cgroup")
# A lost node (kubelet stopped) is marked NotReady after 16 s and its Pods evicted 30 s later, instead of
# Kubernetes' 50 s and 5 minutes, so a test of node loss takes a minute. kubelet renews its lease every 2 s.
LOST_NODE_TIMING: dict[str, tuple[str, ...]] = {
    "kube-controller-manager": ("--node-monitor-grace-period=16s", "--node-monitor-period=2s"),
    "kube-apiserver": ("--default-not-ready-toleration-seconds=30", "--default-unreachable-toleration-seconds=30"),
}
# The registry hosts whose images the node pulls from the rig's registry instead (the common public ones).
MIRRORED_REGISTRIES = (
    "docker.io",
    "registry-1.docker.io",
    "registry.k8s.io",
    "k8s.gcr.io",
    "gcr.io",
    "ghcr.io",
    "quay.io",
    "nvcr.io",
    "public.ecr.aws",
    "mcr.microsoft.com",
)


def build_dir() -> Path:
    return kube_rig.cache_dir() / "real-node" / kube_rig.versions()["K8S_VERSION"]


def rootfs() -> Path:
    return kube_rig.cache_dir() / "real-node" / f"rootfs-{kube_rig.versions()['DEBIAN_SUITE']}"


def _run(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout


@dataclass
class Slot:
    """Everything named after a node's index K, in one place: its network namespace and cgroup root
    (``torchjob-node<K>``), its subnet ``10.99.<K>.0/24``, its veth pair, and a short folder for what holds unix
    sockets (containerd's, kubelet's root): a socket's path must stay under 104 bytes, and the rig's own folder
    (a pytest tmp_path, say) can be much deeper."""

    index: int

    @property
    def name(self) -> str:
        return f"torchjob-node{self.index}"

    @property
    def host_ip(self) -> str:
        return f"10.99.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"10.99.{self.index}.2"

    @property
    def host_veth(self) -> str:
        return f"tjh{self.index}"

    @property
    def node_veth(self) -> str:
        return f"tjn{self.index}"

    @property
    def short_dir(self) -> Path:
        return Path(f"/var/lib/{self.name}")

    @property
    def socket(self) -> str:
        return f"{self.short_dir}/containerd.sock"

    @property
    def kubelet_root(self) -> str:
        return f"{self.short_dir}/kubelet"


def _free_slot() -> Slot:
    """The first K with neither a namespace nor a host address of ours: two rigs never share a subnet. The
    slot is claimed by creating its folder (mkdir is atomic), so two rigs starting at once never pick the same."""
    addresses = _run("ip", "-4", "-o", "addr")
    for k in range(1, 250):
        slot = Slot(k)
        if Path(f"/run/netns/{slot.name}").exists() or f" {slot.host_ip}/" in addresses:
            continue
        try:
            slot.short_dir.mkdir(parents=True)
        except FileExistsError:
            continue
        return slot
    raise RuntimeError("no free 10.99.K.0/24 subnet for a real node")


class RealNode(Slot):
    """The state of one real node, kept in ``<rig>/node/state.json`` so that ``down`` works from any shell."""

    def __init__(self, rig: kube_rig.Rig) -> None:
        self.rig = rig
        self.directory = rig.directory / "node"
        data = json.loads((self.directory / "state.json").read_text())
        super().__init__(data["index"])
        self.registry: str = data["registry"]

    def namespace(self, name: str) -> str:
        """Create namespace ``name`` unless it exists, and wait for its default ServiceAccount (Pods need it)."""
        self.rig.kubectl("create", "namespace", name, check=False)
        kube_rig.wait_for(
            self.rig.directory,
            f"the default service account of {name}",
            lambda: self.rig.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
            60,
        )
        return name

    def claim(self, namespace: str, name: str) -> Path:
        """A PersistentVolumeClaim ``name`` in ``namespace``, bound to a hostPath volume of the node's (a static
        PersistentVolume: the node has no provisioner). Returns the folder the Pods' files land in."""
        folder = self.directory / "volumes" / f"{namespace}-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        volume = f"{namespace}-{name}"
        common = {"accessModes": ["ReadWriteMany"], "storageClassName": "node-local"}
        self.rig.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {**common, "capacity": {"storage": "1Gi"}, "hostPath": {"path": str(folder)}},
            }
        )
        claim_spec = {**common, "volumeName": volume, "resources": {"requests": {"storage": "1Gi"}}}
        self.rig.apply(
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": claim_spec},
            namespace=namespace,
        )
        return folder

    def container_pids(self, namespace: str, pod: str, container: str = "pytorch") -> list[int]:
        """The host pids of a running container's processes, found through its cgroup (named by its ID)."""
        found = json.loads(self.rig.kubectl("get", "pod", pod, "-n", namespace, "-o", "json").stdout)
        statuses = found.get("status", {}).get("containerStatuses", [])
        container_id = next(s["containerID"] for s in statuses if s["name"] == container).split("://")[1]
        pids: list[int] = []
        for procs in (CGROUP_ROOT / "memory" / self.name).rglob(f"{container_id}/cgroup.procs"):
            pids += [int(p) for p in procs.read_text().split()]
        return pids

    def push_image(
        self,
        image: str,
        files: dict[str, Path | bytes],
        links: dict[str, str] | None = None,
        base: bool = True,
        **config: Any,
    ) -> str:
        """Publish ``image`` under its own name: the Debian base with python3 (unless ``base`` is false), plus
        ``files`` and symbolic ``links`` (path in the image → target)."""
        layers = [oci_images.rootfs_layer(rootfs(), kube_rig.cache_dir() / "real-node" / "layers")] if base else []
        layers.append(oci_images.files_layer(files, self.directory / "layers", links or {}))
        return oci_images.push(self.registry, image, layers, **config)


def _namespace_script(veth: str, node_ip: str, fakes: Path) -> str:
    lines = []
    # kubelet insists on these values; the fakes live in this mount namespace only (the host keeps its own).
    for key, value in (("vm/overcommit_memory", "1"), ("kernel/panic", "10"), ("kernel/panic_on_oops", "1")):
        fake = fakes / key.replace("/", "_")
        fake.write_text(value + "\n")
        lines.append(f"mount --bind {fake} /proc/sys/{key}")
    # The node's own lookups (containerd's pulls of a name the registry lacks) stay inside the namespace.
    resolv = fakes / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    lines.append(f"mount --bind {resolv} /etc/resolv.conf")
    # containerd 1.6 keeps shim sockets and runc's state under /run/containerd whatever its config says: a
    # tmpfs of the node's own there keeps them apart from a containerd the host may run, and goes with it.
    lines += ["mkdir -p /run/containerd", "mount -t tmpfs -o mode=0700 tmpfs /run/containerd"]
    lines += [
        "ip link set lo up",
        f"ip link set {veth} name eth0",
        f"ip addr add {node_ip}/24 dev eth0",
        "ip link set eth0 up",
        "echo 1 > /proc/sys/net/ipv4/ip_forward",  # this namespace's own: pods reach the node and each other
        "exec sleep infinity",
    ]
    return "set -e\n" + "\n".join(lines) + "\n"


def _write_configs(node: RealNode, rig_dir: Path, server: str) -> dict[str, Path]:
    d = node.directory
    for sub in ("net.d", "fakes", "pod-logs", "ipam"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    spec = json.loads(_run("ctr", "oci", "spec"))
    spec["mounts"].append(
        {
            "destination": RUNTIME_MOUNT,
            "type": "bind",
            "source": sysconfig.get_paths()["purelib"],
            "options": ["rbind", "ro"],
        }
    )
    (d / "base-spec.json").write_text(json.dumps(spec))
    # containerd 1.6 has no catch-all mirror ("*" and hosts.d/_default came in 1.7): name every host.
    mirrors = "".join(
        f'  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{host}"]\n    endpoint = ["http://{node.registry}"]\n'
        for host in MIRRORED_REGISTRIES
    )
    (d / "containerd.toml").write_text(
        f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{node.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      base_runtime_spec = "{d}/base-spec.json"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/net.d"
{mirrors}"""
    )
    bridge = {
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "ipMasq": True,
        "hairpinMode": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": f"{d}/ipam",
        },
    }
    conflist = {
        "cniVersion": "1.0.0",
        "name": "pods",
        "plugins": [bridge, {"type": "portmap", "capabilities": {"portMappings": True}}],
    }
    (d / "net.d" / "10-pods.conflist").write_text(json.dumps(conflist))
    (d / "resolv.conf").write_text(f"nameserver {node.host_ip}\n")  # nothing answers there: no way out
    kubelet = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{node.name}",
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "address": node.node_ip,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(rig_dir / "ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},  # only holders of a certificate from the rig's CA get in
        "clusterDomain": "cluster.local",
        "clusterDNS": [POD_GATEWAY],
        "resolvConf": str(d / "resolv.conf"),
        "failSwapOn": False,
        "podLogsDir": str(d / "pod-logs"),
        "rotateCertificates": False,
        "serializeImagePulls": False,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
        "imageGCHighThresholdPercent": 100,
        "maxPods": 32,
        "nodeStatusReportFrequency": "10s",
        "nodeLeaseDurationSeconds": 8,
    }
    (d / "kubelet.yaml").write_text(json.dumps(kubelet))
    (d / "Corefile").write_text(
        f"""cluster.local:53 in-addr.arpa:53 {{
    errors
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {rig_dir}/admin.kubeconfig torchjob-test
        pods insecure
    }}
    cache 5
}}
"""
    )
    (d / "registry.yaml").write_text(
        json.dumps(
            {
                "version": 0.1,
                "log": {"level": "warn", "accesslog": {"disabled": True}},
                "storage": {"filesystem": {"rootdirectory": str(d / "registry")}},
                "http": {"addr": node.registry},
            }
        )
    )
    kube_rig.issue_certificate(rig_dir, "kubelet", f"system:node:{NODE_NAME}", ("system:nodes",))
    return {"kubeconfig": kube_rig.write_kubeconfig(rig_dir, "kubelet", server)}


def _node_ready(rig: kube_rig.Rig) -> bool:
    answer = rig.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
    if answer.returncode != 0:
        return False
    conditions = json.loads(answer.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def up(directory: Path, timeout: float = 120) -> RealNode:
    """Start a control plane in ``directory`` and one real node beside it (see the module doc)."""
    binaries = build_dir() / "bin"
    missing = [b for b in ("kubelet", "coredns", "pause", "registry") if not (binaries / b).exists()]
    if missing or not (rootfs() / ".complete").exists():
        raise RuntimeError(
            f"the real node is not built ({', '.join(missing) or 'rootfs'}): run tools/bootstrap --test-servers"
        )
    slot = _free_slot()
    netns = slot.name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "node").mkdir(exist_ok=True)
    registry = f"{slot.host_ip}:{kube_rig.free_port()}"
    (directory / "node" / "state.json").write_text(json.dumps({"index": slot.index, "registry": registry}))
    try:
        _run("ip", "netns", "add", netns)
        _run("ip", "link", "add", slot.host_veth, "type", "veth", "peer", "name", slot.node_veth, "netns", netns)
        _run("ip", "addr", "add", f"{slot.host_ip}/24", "dev", slot.host_veth)
        _run("ip", "link", "set", slot.host_veth, "up")
        rig = kube_rig.up(directory, nodes=0, timeout=timeout, address=slot.host_ip, extra_args=LOST_NODE_TIMING)
        node = RealNode(rig)
        paths = _write_configs(node, directory, rig.server)
        d = node.directory
        namespace_pid = kube_rig.start_process(
            directory,
            "node-namespace",
            [
                "nsenter",
                f"--net=/run/netns/{netns}",
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                _namespace_script(slot.node_veth, node.node_ip, d / "fakes"),
            ],
        )
        enter = ["nsenter", "-t", str(namespace_pid), "-n", "-m"]
        kube_rig.wait_for(
            directory,
            "the node's network",
            lambda: (
                node.node_ip
                in subprocess.run([*enter, "ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
            ),
            30,
        )
        for hierarchy in CGROUP_ROOT.iterdir():  # kubelet's cgroupRoot must exist in every v1 hierarchy
            if (hierarchy / "cgroup.procs").exists() and hierarchy.name != "unified":
                (hierarchy / node.name).mkdir(exist_ok=True)
        kube_rig.start_process(directory, "registry", [str(binaries / "registry"), "serve", str(d / "registry.yaml")])
        kube_rig.wait_for(directory, "the registry", lambda: http_ok(f"http://{registry}/v2/"), 30)
        node.push_image(PAUSE_IMAGE, {"/pause": binaries / "pause"}, base=False, entrypoint=["/pause"])
        kube_rig.start_process(directory, "containerd", [*enter, "containerd", "--config", str(d / "containerd.toml")])
        kube_rig.wait_for(directory, "containerd", lambda: Path(node.socket).exists(), 30)
        kube_rig.start_process(
            directory,
            "kubelet",
            [
                *enter,
                str(binaries / "kubelet"),
                f"--config={d}/kubelet.yaml",
                f"--kubeconfig={paths['kubeconfig']}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={node.node_ip}",
                f"--root-dir={node.kubelet_root}",
                f"--cert-dir={d}/kubelet-pki",
                "--v=1",
            ],
        )
        kube_rig.start_process(directory, "coredns", [*enter, str(binaries / "coredns"), "-conf", str(d / "Corefile")])
        kube_rig.wait_for(directory, f"node {NODE_NAME} Ready", lambda: _node_ready(rig), timeout)
        return node
    except BaseException:
        _teardown(directory, slot)
        raise


def http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as answer:
        return bool(answer.status == 200)


def _pids_in_cgroup(cgroup: str) -> set[int]:
    pids: set[int] = set()
    for procs in (CGROUP_ROOT / "memory" / cgroup).rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in procs.read_text().split()}
    return pids


def _pids_in_netns(netns: str) -> set[int]:
    try:
        inode = os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return set()
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(entry / "ns" / "net").st_ino == inode:
                    pids.add(int(entry.name))
    return pids


def down(directory: Path) -> None:
    """Stop the node's Pods and every process of the rig, then remove what is provably the node's alone."""
    state_file = directory / "node" / "state.json"
    if not state_file.exists():
        kube_rig.down(directory)
        return
    _teardown(directory, Slot(json.loads(state_file.read_text())["index"]))


def _teardown(directory: Path, slot: Slot) -> None:
    netns = cgroup = slot.name
    with contextlib.suppress(Exception):  # a half-started rig may have no API server to ask
        # While kubelet still runs, it stops the containers and releases each Pod's network (CNI DEL).
        kube_rig.Rig(directory).kubectl(
            "delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--timeout=30s", check=False, timeout=40
        )
    kube_rig.down(directory, keep_files=True)
    # Container shims live in the node's network namespace, containers in its cgroup root: both are ours.
    for _ in range(10):
        leftovers = _pids_in_cgroup(cgroup) | _pids_in_netns(netns)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not leftovers:
            break
        time.sleep(0.3)
    subprocess.run(["ip", "netns", "del", netns], capture_output=True)
    subprocess.run(["ip", "link", "del", slot.host_veth], capture_output=True)  # gone with its peer, unless half made
    for hierarchy in CGROUP_ROOT.iterdir():
        root = hierarchy / cgroup
        if root.is_dir():
            # Deepest first: a cgroup can be removed only once it has no children.
            for leaf in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    leaf.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()
    shutil.rmtree(slot.short_dir, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)
