# Sourced by the rig's build scripts (and by torchjob's tools/go-build-env.sh): the pinned versions, the cache
# they build into, and a Go toolchain that never downloads another one.
# Usage: source go-env.sh; require_go "PREFIX" "WHAT"   (PREFIX starts its messages, WHAT is built)
# shellcheck source=versions.env
source "$(dirname "${BASH_SOURCE[0]}")/versions.env"
# The cache is shared with torchjob's own test servers (one warm cache per machine): KUBERIG_CACHE, else
# TORCHJOB_CACHE, else ~/.cache/torchjob.
CACHE="${KUBERIG_CACHE:-${TORCHJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchjob}}"

require_go() {
  if ! command -v go >/dev/null 2>&1; then
    export PATH="/usr/local/go/bin:$PATH"
    command -v go >/dev/null 2>&1 || { echo "$1: Go is needed to build $2; install Go first" >&2; exit 1; }
  fi
  export GOTOOLCHAIN=local CGO_ENABLED=0
  export GOPATH="${GOPATH:-$CACHE/gopath}"
}
