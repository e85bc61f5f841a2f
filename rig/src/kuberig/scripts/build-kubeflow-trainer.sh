#!/usr/bin/env bash
# Builds Kubeflow Trainer v2's controller manager and the JobSet controller it drives from the Go module proxy
# into the cache: the anchor bench/ measures torchjob's TrainJobs beside (addons/kubeflow_trainer.py runs them).
# Not part of `kube-rig build`'s default set: only that benchmark needs them.
set -euo pipefail
# shellcheck source=go-env.sh
source "$(dirname "$0")/go-env.sh"
TRAINER="$CACHE/kubeflow/trainer-$KUBEFLOW_TRAINER_VERSION/bin"
JOBSET="$CACHE/jobset/jobset-$JOBSET_VERSION/bin"
require_go kubeflow-trainer "Kubeflow Trainer and JobSet"
if [ ! -x "$TRAINER/trainer-controller-manager" ]; then
  echo "kubeflow-trainer: go install trainer-controller-manager $KUBEFLOW_TRAINER_VERSION into $TRAINER" >&2
  mkdir -p "$TRAINER"
  GOFLAGS=-mod=mod GOBIN="$TRAINER" go install -trimpath -ldflags "-s -w" \
    "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager@$KUBEFLOW_TRAINER_VERSION"
fi
if [ ! -x "$JOBSET/jobset" ]; then
  # JobSet's main package is its module's root, and `go install module@version` asks the proxy for the module's
  # version list, which it refuses here: the module is downloaded and built where the module cache holds it.
  echo "kubeflow-trainer: building jobset $JOBSET_VERSION into $JOBSET" >&2
  mkdir -p "$JOBSET"
  dir=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/jobset@$JOBSET_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  (cd "$dir" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$JOBSET/jobset" .)
fi
echo "kubeflow-trainer: trainer $KUBEFLOW_TRAINER_VERSION and jobset $JOBSET_VERSION up to date"
