#!/usr/bin/env bash
# Builds Kueue (sigs.k8s.io/kueue, the Kubernetes job queue) from the Go module proxy into the cache: the queue
# that admits suspended jobs on the rig, as it does on a real cluster (addons/kueue.py runs it). A plain
# `go install` works: the module has no replace directives. Its CRDs and webhook manifests are read from the
# same module in the Go module cache, unchanged.
set -euo pipefail
# shellcheck source=go-env.sh
source "$(dirname "$0")/go-env.sh"
BIN="$CACHE/kueue/kueue-$KUEUE_VERSION/bin"
[ -x "$BIN/kueue" ] && { echo "kueue: kueue $KUEUE_VERSION up to date in $BIN"; exit 0; }
require_go kueue Kueue
echo "kueue: go install kueue $KUEUE_VERSION into $BIN" >&2
mkdir -p "$BIN"
GOFLAGS=-mod=mod GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
