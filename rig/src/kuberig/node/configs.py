"""What a real node's daemons read, rendered from plain values (pure: golden-tested in rig/tests).

What this VM kind needs: cgroup v1 only (kubelet ``failCgroupV1: false``, ``cgroupDriver: cgroupfs``); no
CAP_SYS_RESOURCE (containerd ``restrict_oom_score_adj``); kubelet's global sysctls faked inside the node's
mount namespace, so the host keeps its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kuberig.images.registry import MIRRORED_REGISTRIES
from kuberig.naming import POD_NETWORK, RUNTIME_MOUNT, Slot

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
# kubelet insists on these values; the fakes live in the node's mount namespace only.
FAKED_SYSCTLS = (("vm/overcommit_memory", "1"), ("kernel/panic", "10"), ("kernel/panic_on_oops", "1"))


def namespace_script(fakes: Path, network: list[str]) -> str:
    """The node's namespace holder: fake kubelet's sysctls, keep lookups and containerd's state inside, set up
    the ``network`` lines, then wait for ever (the namespaces live as long as this shell)."""
    lines = [f"mount --bind {fakes / key.replace('/', '_')} /proc/sys/{key}" for key, _ in FAKED_SYSCTLS]
    # The node's own lookups (containerd's pulls of a name the registry lacks) stay inside the namespace.
    lines.append(f"mount --bind {fakes / 'resolv.conf'} /etc/resolv.conf")
    # containerd 1.6 keeps shim sockets and runc's state under /run/containerd whatever its config says: a
    # tmpfs of the node's own there keeps them apart from a containerd the host may run, and goes with it.
    lines += ["mkdir -p /run/containerd", "mount -t tmpfs -o mode=0700 tmpfs /run/containerd"]
    lines += [*network, "exec sleep infinity"]
    return "set -e\n" + "\n".join(lines) + "\n"


def fake_files() -> dict[str, str]:
    """The files the namespace script binds over the host's (name in the fakes folder → content)."""
    files = {key.replace("/", "_"): value + "\n" for key, value in FAKED_SYSCTLS}
    files["resolv.conf"] = "nameserver 127.0.0.1\n"
    return files


def base_spec(default_spec: dict[str, Any], site_packages: str) -> dict[str, Any]:
    """runc's default spec plus the node's Python environment, read-only at :data:`RUNTIME_MOUNT`, less its open
    files limit of 1,024: containers inherit containerd's own, as they do under the CRI's default spec."""
    mount = {"destination": RUNTIME_MOUNT, "type": "bind", "source": site_packages, "options": ["rbind", "ro"]}
    process = dict(default_spec.get("process") or {})
    process["rlimits"] = [r for r in process.get("rlimits") or [] if r.get("type") != "RLIMIT_NOFILE"]
    return {**default_spec, "process": process, "mounts": [*default_spec["mounts"], mount]}


def containerd_toml(directory: Path, socket: str, registry: str) -> str:
    # containerd 1.6 has no catch-all mirror ("*" and hosts.d/_default came in 1.7): name every host.
    mirrors = "".join(
        f'  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{host}"]\n    endpoint = ["http://{registry}"]\n'
        for host in MIRRORED_REGISTRIES
    )
    d = directory
    return f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{socket}"
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


def cni_conflist(slot: Slot, ipam_dir: Path) -> dict[str, Any]:
    """Pods on the node's bridge ``cni0``, addressed from the slot's Pod subnet. No masquerading: a Pod on another
    node sees this Pod's own address (the nodes route Pod subnets to each other, network/namespaces.py)."""
    bridge = {
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "ipMasq": False,
        "hairpinMode": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": slot.pod_subnet, "gateway": slot.pod_gateway}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(ipam_dir),
        },
    }
    return {
        "cniVersion": "1.0.0",
        "name": "pods",
        "plugins": [bridge, {"type": "portmap", "capabilities": {"portMappings": True}}],
    }


def kubelet_config(slot: Slot, directory: Path, client_ca: Path) -> dict[str, Any]:
    d = directory
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{slot.name}",
        "containerRuntimeEndpoint": f"unix://{slot.socket}",
        "address": slot.node_ip,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},  # only holders of a certificate from the cluster's CA get in
        "clusterDomain": "cluster.local",
        "clusterDNS": [slot.pod_gateway],
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


def kube_proxy_config(node: str, slot: Slot, kubeconfig: Path) -> dict[str, Any]:
    """kube-proxy in iptables mode, inside the node's namespace: ClusterIP Services (``kubernetes.default``
    included) answer from the node's Pods. It touches no global sysctl (conntrack sizes, route_localnet), and it
    masquerades all Service traffic, so a reply from a Pod on the same bridge returns through the node's NAT
    (the bridge does not call iptables: no br_netfilter needed)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "hostnameOverride": node,
        "bindAddress": slot.node_ip,
        "clusterCIDR": POD_NETWORK,
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def corefile(admin_kubeconfig: Path, context: str) -> str:
    """A minimal CoreDNS on the node: cluster names (Services, Pods) from the API, nothing else."""
    return f"""cluster.local:53 in-addr.arpa:53 {{
    errors
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {admin_kubeconfig} {context}
        pods insecure
    }}
    cache 5
}}
"""


def write_json(path: Path, document: object) -> None:
    path.write_text(json.dumps(document))
