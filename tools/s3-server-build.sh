#!/usr/bin/env bash
# Builds versitygw (a real S3 gateway over a local folder) from the Go module proxy into the cache, for
# the tests of S3 checkpoint storage. Rebuilt only when missing or when the pinned version changes.
set -euo pipefail
# shellcheck source=tools/versions.env
source "$(dirname "$0")/versions.env"
CACHE="${TORCHJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchjob}"
BIN="$CACHE/s3/versitygw-$VERSITYGW_VERSION/bin"
[ -x "$BIN/versitygw" ] && { echo "s3-server: versitygw up to date in $BIN"; exit 0; }
if ! command -v go >/dev/null 2>&1; then
  export PATH="/usr/local/go/bin:$PATH"
  command -v go >/dev/null 2>&1 || { echo "s3-server: Go is needed to build versitygw" >&2; exit 1; }
fi
echo "s3-server: building versitygw $VERSITYGW_VERSION into $BIN" >&2
mkdir -p "$BIN"
GOTOOLCHAIN=local CGO_ENABLED=0 GOPATH="${GOPATH:-$CACHE/gopath}" GOBIN="$BIN" \
  go install -trimpath -ldflags "-s -w" "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
