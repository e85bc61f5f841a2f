#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok)
# from the Go module proxy into a cache directory outside the repo. Rebuilds only what is missing or whose
# pinned version changed. Usage: kube-rig-build.sh [BIN_DIR]
set -euo pipefail

# Pinned versions live in one file (versions.env), read by this script and by kuberig.toolchain.
# shellcheck source=go-env.sh
source "$(dirname "$0")/go-env.sh"
BIN="${1:-$CACHE/kube/$K8S_VERSION-kwok-$KWOK_VERSION/bin}"
WORK="$CACHE/kube/src-$K8S_VERSION"
require_go kube-rig "the control plane"
export GOFLAGS=-mod=mod
mkdir -p "$BIN" "$WORK"

components=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
missing=()
for c in "${components[@]}" etcd kwok; do [ -x "$BIN/$c" ] || missing+=("$c"); done
if [ ${#missing[@]} -eq 0 ]; then echo "kube-rig: binaries up to date in $BIN"; exit 0; fi
echo "kube-rig: building ${missing[*]} (Kubernetes $K8S_VERSION, kwok $KWOK_VERSION) into $BIN" >&2

minor="${K8S_VERSION#v1.}"; staging_tag="v0.${minor}"
cd "$WORK"
if [ ! -f .generated ]; then
  # (Re)generate the wrapper module; the marker is written only once it is complete.
  rm -f go.mod go.sum
  go mod init torchjob.test/kuberig >/dev/null 2>&1
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with local paths; outside
  # its repo those must point at the published tags instead. Generate the replaces from its own go.mod.
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$gomod" | awk '{print $1}' | sort -u | while read -r mod; do
    go mod edit -replace "$mod=$mod@$staging_tag"
  done
  go mod edit -require "k8s.io/kubernetes@$K8S_VERSION"
  touch .generated
fi

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*} \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
for c in "${components[@]}"; do
  [ -x "$BIN/$c" ] && continue
  echo "kube-rig: go build $c" >&2
  go build -trimpath -ldflags "$ldflags" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c"
done

if [ ! -x "$BIN/etcd" ]; then
  # The etcd server version Kubernetes itself pins in its go.mod.
  etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
  echo "kube-rig: go build etcd $etcd_version" >&2
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
fi

if [ ! -x "$BIN/kwok" ]; then
  echo "kube-rig: go install kwok $KWOK_VERSION" >&2
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
fi
echo "kube-rig: built into $BIN" >&2
