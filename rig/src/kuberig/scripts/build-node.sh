#!/usr/bin/env bash
# Builds what the real-node tier of the test cluster runs (kuberig.node.kubelet), cached outside the repo:
#   - Debian's containerd, runc, CNI plugins, iptables and debootstrap (apt, once per machine);
#   - kubelet from the same Kubernetes module as the control plane (build-kube.sh runs first);
#   - a CoreDNS with only the plugins the node needs, the pod sandbox's pause program, and the
#     distribution registry that serves the test images (all from the Go module proxy);
#   - a Debian root filesystem with Python 3 (debootstrap from this machine's own apt source), the base
#     layer of every test image.
# Each piece is rebuilt only when missing or when its pinned version (versions.env) changed.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=go-env.sh
source "$HERE/go-env.sh"
OUT="$CACHE/real-node/$K8S_VERSION"
BIN="$OUT/bin"
mkdir -p "$BIN"

packages=(containerd runc containernetworking-plugins iptables debootstrap)
absent=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || absent+=("$p"); done
if [ ${#absent[@]} -gt 0 ]; then
  echo "real-node: apt-get install ${absent[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${absent[@]}" >/dev/null
fi

require_go real-node "the real test node"
export GOFLAGS=-mod=mod
if [ ! -x "$BIN/kubelet" ]; then
  bash "$HERE/build-kube.sh" >/dev/null
  minor="${K8S_VERSION#v1.}"
  echo "real-node: go build kubelet $K8S_VERSION" >&2
  # The control plane's wrapper module already pins every Kubernetes staging module; kubelet shares it.
  (cd "$CACHE/kube/src-$K8S_VERSION" && go build -trimpath -o "$BIN/kubelet" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*}" \
    k8s.io/kubernetes/cmd/kubelet)
fi
if [ ! -x "$BIN/kube-proxy" ]; then
  bash "$HERE/build-kube.sh" >/dev/null
  echo "real-node: go build kube-proxy $K8S_VERSION" >&2
  (cd "$CACHE/kube/src-$K8S_VERSION" && go build -trimpath -o "$BIN/kube-proxy" -ldflags "-s -w" \
    k8s.io/kubernetes/cmd/kube-proxy)
fi

# build_main NAME SOURCE [MODULE@VERSION]: a one-file main package in a wrapper module of its own.
build_main() {
  local name=$1 source=$2 requirement=${3:-}
  [ -x "$BIN/$name" ] && return
  echo "real-node: go build $name ${requirement#*@}" >&2
  local work="$CACHE/real-node/src-$name"
  rm -rf "$work" && mkdir -p "$work"
  cp "$source" "$work/main.go"
  (cd "$work" && go mod init "torchjob.test/$name" >/dev/null 2>&1 &&
    { [ -z "$requirement" ] || go get "$requirement" >/dev/null 2>&1; } &&
    go mod tidy >/dev/null 2>&1 && go build -trimpath -ldflags "-s -w" -o "$BIN/$name" .)
}
build_main pause "$HERE/node-programs/pause.go"
build_main coredns "$HERE/node-programs/coredns.go" "github.com/coredns/coredns@$COREDNS_VERSION"
if [ ! -x "$BIN/registry" ]; then
  echo "real-node: go install registry $REGISTRY_VERSION" >&2
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" \
    "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION"
fi

ROOTFS="$CACHE/real-node/rootfs-$DEBIAN_SUITE"
if [ ! -f "$ROOTFS/.complete" ]; then
  # The first deb822 source of this machine names the Debian mirror it is allowed to use.
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null ||
    awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
  echo "real-node: debootstrap $DEBIAN_SUITE with python3 into $ROOTFS" >&2
  rm -rf "$ROOTFS"
  debootstrap --variant=minbase --include=python3,python-is-python3 "$DEBIAN_SUITE" "$ROOTFS" "$mirror" >/dev/null
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  touch "$ROOTFS/.complete"
fi
echo "real-node: built into $OUT" >&2
