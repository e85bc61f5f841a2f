#!/usr/bin/env bash
# Builds the real `helm` (v3) from the Go module proxy into the cache, for the test that installs, upgrades and
# uninstalls torchjob's chart (deploy/chart) on the test cluster. Debian has no helm package; release binaries
# cannot be downloaded here. Rebuilt only when missing or when the pinned version changes.
set -euo pipefail
# shellcheck source=tools/go-build-env.sh
source "$(dirname "$0")/go-build-env.sh"
BIN="$CACHE/helm/helm-$HELM_VERSION/bin"
[ -x "$BIN/helm" ] && { echo "helm: helm $HELM_VERSION up to date in $BIN"; exit 0; }
require_go helm helm
echo "helm: building helm $HELM_VERSION into $BIN" >&2
mkdir -p "$BIN"
GOBIN="$BIN" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
