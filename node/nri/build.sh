#!/usr/bin/env bash
# Builds the tmc-nri plugin binary (static, reproducible: -trimpath, no VCS stamp) into OUT
# (default node/nri/bin), with the control plane's Go toolchain and caches. Prints its path.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${TMC_K8S_CACHE:-$HOME/.cache/tmc-k8s}
OUT=${1:-$HERE/bin}
GO=$(command -v go || echo "$CACHE/go-venv/bin/go")
export GOMODCACHE=$CACHE/gomodcache GOCACHE=$CACHE/gocache GOPATH=$CACHE/gopath
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
mkdir -p "$OUT"
cd "$HERE"
"$GO" build -trimpath -ldflags "-s -w" -o "$OUT/tmc-nri" ./cmd/tmc-nri
echo "$OUT/tmc-nri"
