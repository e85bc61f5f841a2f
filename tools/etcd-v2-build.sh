#!/usr/bin/env bash
# Builds an etcd 3.5 server from the Go module proxy into the cache, for the tests of torchrun's `etcd` and
# `etcd-v2` rendezvous backends. Both speak etcd's v2 API (through python-etcd), which etcd 3.6 — the one the
# Kubernetes rig uses — no longer serves; 3.5 still does with --enable-v2. Rebuilt only when missing or when
# the pinned version changes.
set -euo pipefail
# shellcheck source=tools/go-build-env.sh
source "$(dirname "$0")/go-build-env.sh"
BIN="$CACHE/etcd/etcd-$ETCD_V2_VERSION/bin"
[ -x "$BIN/etcd" ] && { echo "etcd-v2: etcd $ETCD_V2_VERSION up to date in $BIN"; exit 0; }
require_go etcd-v2 etcd
echo "etcd-v2: building etcd $ETCD_V2_VERSION into $BIN" >&2
export GOFLAGS=-mod=mod
WORK="$CACHE/etcd/src-$ETCD_V2_VERSION"
mkdir -p "$BIN" "$WORK"
cd "$WORK"
# etcd 3.5 keeps its main package in the repository's root module, whose replace directives stop a plain
# `go install`; a two-line wrapper module around etcdmain builds the same server.
cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
rm -f go.mod go.sum
go mod init torchjob.test/etcd >/dev/null 2>&1
go get "go.etcd.io/etcd/server/v3@$ETCD_V2_VERSION" >/dev/null 2>&1
go mod tidy >/dev/null 2>&1
go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .
