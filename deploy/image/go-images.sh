#!/usr/bin/env bash
# The placement engine's images without a Docker engine: tmc-scheduler (kube-scheduler with the
# TmcPlacement plugin; the image also carries tmc-dra-publisher) and tmc-extender (the same engine behind kube-scheduler's extender
# protocol), each a static Go binary (CGO off) alone in an OCI image layout packed by oci.py.
#
#   deploy/image/go-images.sh [OUT_PARENT]      (./dev image calls it; OUT_PARENT defaults to
#                                                build: build/image-tmc-scheduler and
#                                                build/image-tmc-extender)
#
# Reproducible: the source is `git archive` of the commit (TMC_IMAGE_REV, default HEAD), the
# build is `go build -trimpath` with the module's pinned requirements, no VCS stamp and an empty
# build id, every timestamp is the commit's (SOURCE_DATE_EPOCH) and oci.py normalises the
# layer: two builds of one commit with one Go toolchain give the same digests. The Go toolchain,
# module cache and build cache are the control plane's (~/.cache/tmc-k8s).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT_PARENT=${1:-$ROOT/build}
K8S_VERSION=${TMC_K8S_VERSION:-v1.36.3}
CACHE=${TMC_K8S_CACHE:-$HOME/.cache/tmc-k8s}

log() { printf '[go-images] %s\n' "$*" >&2; }

REVISION=$(git -C "$ROOT" rev-parse "${TMC_IMAGE_REV:-HEAD}^{commit}")
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct "$REVISION")}
VERSION=$(git -C "$ROOT" show "$REVISION:deploy/helm/tmc/Chart.yaml" | sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')
if ! git -C "$ROOT" diff --quiet "$REVISION" -- scheduler/plugin; then
    log "note: uncommitted changes are not in the images (they are built from $REVISION)"
fi

GO=$(command -v go || echo "$CACHE/go-venv/bin/go")
[ -x "$GO" ] || { log "no Go toolchain: run tests/scheduler/controlplane/build.sh first"; exit 3; }
export GOMODCACHE=$CACHE/gomodcache GOCACHE=$CACHE/gocache GOPATH=$CACHE/gopath
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOOS=linux GOARCH=${GOARCH:-amd64}

# Everything this build writes is in WORK (and OUT.partial-* until it is complete): an
# interrupted build (Ctrl-C, a kill) removes them and leaves any earlier image as it was.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tmc-go-images.XXXXXX")
PARTIALS=()
cleanup() {
    rm -rf "$WORK" "${PARTIALS[@]}"
}
trap cleanup EXIT
trap 'log "interrupted: removed $WORK and the partial images"; exit 130' INT TERM

# The compiler's own temporary files too (go build makes them under TMPDIR otherwise).
export GOTMPDIR=$WORK/gotmp
mkdir -p "$WORK/src" "$GOTMPDIR"
git -C "$ROOT" archive --format=tar "$REVISION" scheduler/plugin | tar -C "$WORK/src" -xf -
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
ldflags="-s -w -buildid="
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=$REVISION"
done

mkdir -p "$OUT_PARENT"
for cmd in tmc-scheduler tmc-extender; do
    log "building $cmd ($K8S_VERSION, tmc $VERSION at $REVISION, $("$GO" version | cut -d' ' -f3))"
    rootfs=$WORK/rootfs-$cmd
    mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$rootfs/tmp"
    (cd "$WORK/src/scheduler/plugin" && "$GO" build -trimpath -tags selinux,notest,grpcnotrace \
        -ldflags "$ldflags" -o "$rootfs/usr/local/bin/$cmd" "./cmd/$cmd")
    if [ "$cmd" = tmc-scheduler ]; then
        # The scheduler's image also carries tmc-dra-publisher (the chart's dra.enabled runs it).
        (cd "$WORK/src/scheduler/plugin" && "$GO" build -trimpath -ldflags "$ldflags" \
            -o "$rootfs/usr/local/bin/tmc-dra-publisher" ./cmd/tmc-dra-publisher)
    fi
    printf 'root:x:0:0:root:/root:/sbin/nologin\ntmc:x:10001:10001:tmc:/nonexistent:/sbin/nologin\n' > "$rootfs/etc/passwd"
    printf 'root:x:0:\ntmc:x:10001:\n' > "$rootfs/etc/group"
    tar -C "$rootfs" --sort=name --numeric-owner --owner=0 --group=0 -cf "$WORK/$cmd.tar" .
    out=$OUT_PARENT/image-$cmd
    partial=$out.partial-$$
    PARTIALS+=("$partial")
    python3 "$HERE/oci.py" "$WORK/$cmd.tar" "$partial" --ref "$K8S_VERSION" \
        --created "$SOURCE_DATE_EPOCH" \
        --label "org.opencontainers.image.version=$VERSION" \
        --label "org.opencontainers.image.revision=$REVISION" \
        --label "org.opencontainers.image.source=deploy/image/go-images.sh" \
        --user 10001 --workdir / --cmd "/usr/local/bin/$cmd" >&2
    rm -rf "$out"
    mv "$partial" "$out"
    digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$out/index.json")
    log "$cmd: $out ($digest)"
    echo "$cmd $digest"
done
