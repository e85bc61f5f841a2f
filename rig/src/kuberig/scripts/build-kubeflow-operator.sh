#!/usr/bin/env bash
# Builds Kubeflow's own training-operator (v1, the PyTorchJob controller Kubeflow users run today) from the
# Go module proxy into the cache: the anchor that bench/ measures the torchjob operator beside, on the same
# real node. A plain `go install` works: the module has no replace directives.
set -euo pipefail
# shellcheck source=go-env.sh
source "$(dirname "$0")/go-env.sh"
BIN="$CACHE/kubeflow/training-operator-$KUBEFLOW_OPERATOR_VERSION/bin"
[ -x "$BIN/training-operator" ] && { echo "kubeflow: training-operator $KUBEFLOW_OPERATOR_VERSION up to date in $BIN"; exit 0; }
require_go kubeflow "Kubeflow's training-operator"
echo "kubeflow: go install training-operator $KUBEFLOW_OPERATOR_VERSION into $BIN" >&2
mkdir -p "$BIN"
GOFLAGS=-mod=mod GOBIN="$BIN" go install -trimpath -ldflags "-s -w" \
  "github.com/kubeflow/training-operator/cmd/training-operator.v1@$KUBEFLOW_OPERATOR_VERSION"
mv "$BIN/training-operator.v1" "$BIN/training-operator"
