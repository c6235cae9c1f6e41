#!/usr/bin/env bash
# Builds tmc-scheduler (kube-scheduler with the TmcPlacement plugin) and tmc-extender (the same
# engine behind kube-scheduler's extender protocol) into the control plane's cache folder, next to kube-apiserver and kube-scheduler, with the same toolchain, module cache
# and build cache as tests/scheduler/controlplane/build.sh, so that a warm cache rebuilds it in
# seconds and CI's fresh clones on this machine share it.
#
# Usage: scheduler/plugin/build.sh      (idempotent; prints tmc-scheduler's path)
set -euo pipefail

K8S_VERSION=${TMC_K8S_VERSION:-v1.36.3}
CACHE=${TMC_K8S_CACHE:-$HOME/.cache/tmc-k8s}
BIN=$CACHE/bin/$K8S_VERSION
HERE=$(cd "$(dirname "$0")" && pwd)

log() { printf '[tmc-scheduler] %s\n' "$*" >&2; }

GO=$(command -v go || true)
if [ -z "$GO" ]; then
    GO=$CACHE/go-venv/bin/go
    if [ ! -x "$GO" ]; then
        # The control-plane build installs Go from PyPI when the machine has none.
        log "no Go toolchain: run tests/scheduler/controlplane/build.sh first"
        exit 3
    fi
fi
export GOMODCACHE=$CACHE/gomodcache GOCACHE=$CACHE/gocache GOPATH=$CACHE/gopath
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

# The module's go.mod pins k8s.io/kubernetes; the binary must match the control plane it joins.
if ! grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$HERE/go.mod"; then
    log "scheduler/plugin/go.mod does not require k8s.io/kubernetes $K8S_VERSION"
    exit 2
fi

mkdir -p "$BIN"
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
# Version stamping as the release build does, so that the binary reports the real version.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
done
# go build is itself incremental (the build cache): with nothing changed it relinks nothing and
# leaves the binary as it is; it writes the output only when it succeeds.
start=$(date +%s)
for cmd in tmc-scheduler tmc-extender; do
    (cd "$HERE" && "$GO" build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags" \
        -o "$BIN/$cmd" "./cmd/$cmd")
done
log "built in $(( $(date +%s) - start )) s ($("$GO" version))"
echo "$BIN/tmc-scheduler"
