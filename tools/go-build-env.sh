# Sourced by the scripts that build torchjob's own test servers from the Go module proxy (S3, etcd): the
# rig's Go environment and cache (rig/src/kuberig/scripts/go-env.sh) plus the versions pinned here.
# Usage: source go-build-env.sh; require_go "PREFIX" "WHAT"   (PREFIX starts its messages, WHAT is built)
# shellcheck source=../rig/src/kuberig/scripts/go-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../rig/src/kuberig/scripts/go-env.sh"
# shellcheck source=versions.env
source "$(dirname "${BASH_SOURCE[0]}")/versions.env"
