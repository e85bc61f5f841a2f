"""The rig's pure pieces: what a real node's daemons read, the names a slot gives, and config checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from kuberig import naming
from kuberig.config import ClusterConfig, NodeConfig, load
from kuberig.images.registry import MIRRORED_REGISTRIES
from kuberig.naming import Slot
from kuberig.network import namespaces
from kuberig.node import configs


def test_a_slot_names_everything_of_its_node_from_one_number() -> None:
    slot = Slot(7)
    assert (slot.name, slot.host_ip, slot.node_ip) == ("kuberig-node7", "10.99.7.1", "10.99.7.2")
    assert (slot.host_veth, slot.node_veth) == ("krh7", "krn7")  # interface names stay under 15 bytes
    assert (slot.pod_subnet, slot.pod_gateway) == ("10.244.7.0/24", "10.244.7.1")  # a Pod subnet per node
    assert len(slot.socket) < 104  # a unix socket's path limit


def test_containerd_mirrors_every_registry_host_to_the_clusters_registry(tmp_path: Path) -> None:
    rendered = configs.containerd_toml(tmp_path, "/var/lib/kuberig/slot1/containerd.sock", "10.99.1.1:5000")
    parsed = tomllib.loads(rendered)
    cri = parsed["plugins"]["io.containerd.grpc.v1.cri"]
    assert set(cri["registry"]["mirrors"]) == set(MIRRORED_REGISTRIES)
    assert {m["endpoint"][0] for m in cri["registry"]["mirrors"].values()} == {"http://10.99.1.1:5000"}
    assert cri["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE on this VM kind
    assert cri["sandbox_image"] == configs.PAUSE_IMAGE


def test_kubelet_and_cni_take_the_slots_addresses(tmp_path: Path) -> None:
    slot = Slot(3)
    kubelet = configs.kubelet_config(slot, tmp_path, tmp_path / "ca.crt")
    assert kubelet["cgroupRoot"] == "/kuberig-node3" and kubelet["failCgroupV1"] is False
    assert kubelet["address"] == "10.99.3.2" and kubelet["clusterDNS"] == ["10.244.3.1"]
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    bridge = configs.cni_conflist(slot, tmp_path)["plugins"][0]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24", "gateway": "10.244.3.1"}]]
    assert bridge["ipMasq"] is False  # a Pod on another node sees this Pod's own address


def test_a_node_routes_the_other_nodes_and_their_pods_through_the_host() -> None:
    lines = namespaces.setup_script(Slot(2))
    assert "ip route add 10.99.0.0/16 via 10.99.2.1" in lines
    assert "ip route add 10.244.0.0/16 via 10.99.2.1" in lines
    assert not any("default" in line for line in lines)  # nothing leaves this machine


def test_kube_proxy_touches_no_global_sysctl_and_masquerades_service_traffic(tmp_path: Path) -> None:
    proxy = configs.kube_proxy_config("kubelet-node-1", Slot(2), tmp_path / "proxy.kubeconfig")
    assert proxy["mode"] == "iptables" and proxy["clusterCIDR"] == "10.244.0.0/16"
    assert proxy["conntrack"]["maxPerCore"] == 0 and proxy["iptables"]["localhostNodePorts"] is False
    assert proxy["iptables"]["masqueradeAll"] is True and proxy["bindAddress"] == "10.99.2.2"


def test_the_base_spec_lends_the_nodes_python_read_only() -> None:
    spec = configs.base_spec({"mounts": [{"destination": "/proc"}]}, "/site-packages")
    assert spec["mounts"][-1] == {
        "destination": naming.RUNTIME_MOUNT,
        "type": "bind",
        "source": "/site-packages",
        "options": ["rbind", "ro"],
    }
    assert spec["mounts"][0] == {"destination": "/proc"}


def test_the_namespace_script_fakes_sysctls_only_inside(tmp_path: Path) -> None:
    script = configs.namespace_script(tmp_path, ["ip link set lo up"])
    assert f"mount --bind {tmp_path}/vm_overcommit_memory /proc/sys/vm/overcommit_memory" in script
    assert script.rstrip().endswith("exec sleep infinity") and script.startswith("set -e\n")
    assert configs.fake_files()["vm_overcommit_memory"] == "1\n"


def test_a_real_node_gets_the_fast_node_loss_profile_unless_told() -> None:
    real = ClusterConfig("x", (NodeConfig("kubelet"),))
    assert "--node-monitor-grace-period=16s" in real.component_args()["kube-controller-manager"]
    assert ClusterConfig("x").component_args() == {}
    assert ClusterConfig("x", (NodeConfig("kubelet"),), profile="default").component_args() == {}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("name: Bad_Name\n", "name: 'Bad_Name' must be lower-case letters, digits and dashes"),
        ("nodes: [{kind: vm}]\n", "nodes[0].kind: 'vm' must be one of kwok, kubelet"),
        ("nodes: [{kind: kwok, count: -1}]\n", "nodes[0].count: must be 0 or more"),
        ("profile: slow\n", "profile: 'slow' must be one of default, fast-node-loss"),
        ("nodez: []\n", "unknown field 'nodez'"),
        ("- a list\n", "expected a mapping"),
    ],
)
def test_a_bad_config_file_names_its_field(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as raised:
        load(path)
    assert error in str(raised.value)


def test_a_config_file_reads_its_nodes(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("name: demo\nnodes:\n- {kind: kubelet}\n- {kind: kwok, count: 2}\n")
    config = load(path)
    assert (config.name, config.kubelets, config.kwoks) == ("demo", 1, 2)
