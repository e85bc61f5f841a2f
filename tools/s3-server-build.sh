#!/usr/bin/env bash
# Builds versitygw (a real S3 gateway over a local folder) from the Go module proxy into the cache, for
# the tests of S3 checkpoint storage. Rebuilt only when missing or when the pinned version changes.
set -euo pipefail
# shellcheck source=tools/go-build-env.sh
source "$(dirname "$0")/go-build-env.sh"
BIN="$CACHE/s3/versitygw-$VERSITYGW_VERSION/bin"
[ -x "$BIN/versitygw" ] && { echo "s3-server: versitygw up to date in $BIN"; exit 0; }
require_go s3-server versitygw
echo "s3-server: building versitygw $VERSITYGW_VERSION into $BIN" >&2
mkdir -p "$BIN"
GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
