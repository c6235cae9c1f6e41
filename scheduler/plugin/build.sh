#!/usr/bin/env bash
# Builds tmc-scheduler (kube-scheduler with the TmcPlacement plugin), tmc-extender (the same
# engine behind kube-scheduler's extender protocol) and tmc-dra-publisher (tmc's DRA
# ResourceSlices, kept equal to the nodes' published capacity) into the control plane's cache folder, next to kube-apiserver and kube-scheduler, with the same toolchain, module cache
# and build cache as tests/scheduler/controlplane/build.sh, so that a warm cache rebuilds it in
# seconds and CI's fresh clones on this machine share it.
#
# The binaries go into a folder named by a hash of the module's sources (engine-<hash>), so that
# checkouts at different commits that share the cache never run each other's build, and a
# checkout whose sources are unchanged reuses its build without invoking Go.
#
# Usage: scheduler/plugin/build.sh      (idempotent; prints the folder holding the binaries)
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

# The hash covers everything go build reads from this module (not the module cache, which
# go.sum pins).
SOURCES=$(cd "$HERE" && find go.mod go.sum cmd pkg -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) \
    ! -name '*_test.go' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
OUT=$BIN/engine-$SOURCES
if [ -x "$OUT/tmc-scheduler" ] && [ -x "$OUT/tmc-extender" ] && [ -x "$OUT/tmc-dra-publisher" ]; then
    echo "$OUT"
    exit 0
fi

mkdir -p "$BIN"
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
# Version stamping as the release build does, so that the binary reports the real version.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
done
# Built into a private folder and renamed into place: a second build of the same sources running
# at once (two checkouts) finds either nothing or a complete folder, never a half-written binary.
work=$(mktemp -d "$BIN/.engine-$SOURCES.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
for cmd in tmc-scheduler tmc-extender tmc-dra-publisher; do
    (cd "$HERE" && "$GO" build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags" \
        -o "$work/$cmd" "./cmd/$cmd")
done
if ! mv -T "$work" "$OUT" 2>/dev/null; then
    # Another build of the same sources got there first: its binaries are the same.
    [ -x "$OUT/tmc-scheduler" ] || { log "could not install $OUT"; exit 1; }
fi
log "built in $(( $(date +%s) - start )) s ($("$GO" version))"
echo "$OUT"
