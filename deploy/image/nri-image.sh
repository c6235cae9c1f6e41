#!/usr/bin/env bash
# The node's NRI plugin image without a Docker engine: tmc-nri and tmc-dra-node (the DRA door's
# kubelet plugin, which the chart runs beside tmc-nri with dra.enabled), static Go binaries (CGO
# off), in an OCI image layout packed by oci.py, as deploy/image/go-images.sh builds the engine's.
#
#   deploy/image/nri-image.sh [OUT_PARENT]      (./dev image calls it; OUT_PARENT defaults to
#                                               build: build/image-tmc-nri)
#
# Reproducible: the source is `git archive` of the commit (TMC_IMAGE_REV, default HEAD): node/nri
# and the contract types it reads (scheduler/plugin's go.mod, pkg/apis and pkg/dra); the build is
# `go build -trimpath` with the module's pinned requirements, no VCS stamp and an empty build id;
# every timestamp is the commit's (SOURCE_DATE_EPOCH) and oci.py normalises the layer. The Go
# toolchain and caches are the control plane's (~/.cache/tmc-k8s). Prints `tmc-nri DIGEST`.
#
# The plugin runs as root: it writes resctrl groups and the host's plan directory. The image also
# carries the allocator shim (/usr/local/lib/tmc/libtmcalloc.so), built here with gcc.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT_PARENT=${1:-$ROOT/build}
CACHE=${TMC_K8S_CACHE:-$HOME/.cache/tmc-k8s}

log() { printf '[nri-image] %s\n' "$*" >&2; }

REVISION=$(git -C "$ROOT" rev-parse "${TMC_IMAGE_REV:-HEAD}^{commit}")
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct "$REVISION")}
VERSION=$(git -C "$ROOT" show "$REVISION:deploy/helm/tmc/Chart.yaml" | sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')
if ! git -C "$ROOT" diff --quiet "$REVISION" -- node/nri; then
    log "note: uncommitted changes are not in the image (it is built from $REVISION)"
fi

GO=$(command -v go || echo "$CACHE/go-venv/bin/go")
[ -x "$GO" ] || { log "no Go toolchain: run tests/scheduler/controlplane/build.sh first"; exit 3; }
export GOMODCACHE=$CACHE/gomodcache GOCACHE=$CACHE/gocache GOPATH=$CACHE/gopath
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOOS=linux GOARCH=${GOARCH:-amd64}

# Everything this build writes is in WORK (and OUT.partial-* until it is complete): an
# interrupted build removes them and leaves any earlier image as it was.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tmc-nri-image.XXXXXX")
PARTIAL=""
cleanup() { rm -rf "$WORK" ${PARTIAL:+"$PARTIAL"}; }
trap cleanup EXIT
trap 'log "interrupted: removed $WORK and the partial image"; exit 130' INT TERM
export GOTMPDIR=$WORK/gotmp
mkdir -p "$WORK/src" "$GOTMPDIR"
git -C "$ROOT" archive --format=tar "$REVISION" node/nri scheduler/plugin/go.mod \
    scheduler/plugin/go.sum scheduler/plugin/pkg/apis scheduler/plugin/pkg/dra profiler-agent/alloc | tar -C "$WORK/src" -xf -

log "building tmc-nri (tmc $VERSION at $REVISION, $("$GO" version | cut -d' ' -f3))"
rootfs=$WORK/rootfs
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$rootfs/tmp"
(cd "$WORK/src/node/nri" && "$GO" build -trimpath -ldflags "-s -w -buildid=" \
    -o "$rootfs/usr/local/bin/tmc-nri" ./cmd/tmc-nri)
log "building tmc-dra-node"
(cd "$WORK/src/node/nri" && "$GO" build -trimpath -ldflags "-s -w -buildid=" \
    -o "$rootfs/usr/local/bin/tmc-dra-node" ./cmd/tmc-dra-node)
# The allocator shim the plugin installs on a node that has none (the agent's image has no
# compiler to build it there): built with this machine's gcc (Debian bookworm's glibc), its source
# paths mapped away so that the bytes depend on the source only.
command -v gcc >/dev/null || { log "no gcc to build the allocator shim: apt-get install gcc make"; exit 3; }
mkdir -p "$rootfs/usr/local/lib/tmc"
make -s -C "$WORK/src/profiler-agent/alloc" OUT="$WORK/alloc" \
    CFLAGS="-O2 -g -ffile-prefix-map=$WORK/src/=" "$WORK/alloc/libtmcalloc.so"
install -m 0755 "$WORK/alloc/libtmcalloc.so" "$rootfs/usr/local/lib/tmc/libtmcalloc.so"
printf 'root:x:0:0:root:/root:/sbin/nologin\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\n' > "$rootfs/etc/group"
tar -C "$rootfs" --sort=name --numeric-owner --owner=0 --group=0 -cf "$WORK/tmc-nri.tar" .
mkdir -p "$OUT_PARENT"
out=$OUT_PARENT/image-tmc-nri
PARTIAL=$out.partial-$$
python3 "$HERE/oci.py" "$WORK/tmc-nri.tar" "$PARTIAL" --ref "$VERSION" \
    --created "$SOURCE_DATE_EPOCH" \
    --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.revision=$REVISION" \
    --label "org.opencontainers.image.source=deploy/image/nri-image.sh" \
    --user 0 --workdir / --cmd /usr/local/bin/tmc-nri >&2
rm -rf "$out"
mv "$PARTIAL" "$out"
PARTIAL=""
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$out/index.json")
log "tmc-nri: $out ($digest)"
echo "tmc-nri $digest"
