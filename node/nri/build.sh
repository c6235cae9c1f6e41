#!/usr/bin/env bash
# Builds the tmc-nri plugin and the tmc-dra-node DRA node plugin (static, reproducible: -trimpath,
# no VCS stamp) into OUT (default node/nri/bin), with the control plane's Go toolchain and caches.
# Prints tmc-nri's path (tmc-dra-node is beside it).
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
"$GO" build -trimpath -ldflags "-s -w" -o "$OUT/tmc-dra-node" ./cmd/tmc-dra-node
echo "$OUT/tmc-nri"
