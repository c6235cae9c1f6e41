#!/usr/bin/env bash
# The tmc image without a Docker engine: Debian's mmdebstrap builds the root filesystem (as root,
# in a chroot) from Debian's mirror, the project is pip-installed into /opt/tmc from PyPI with
# constraints.txt, and deploy/image/oci.py packs the result as an OCI image layout.
#
#   deploy/image/build.sh [OUT_DIR]        (./dev image calls it; OUT_DIR defaults to build/image)
#   deploy/image/build.sh --profiling [OUT_DIR]
#                                          the profiling variant (default build/image-profiling,
#                                          tagged VERSION-profiling): the same image plus
#                                          packages-profiling.txt (valgrind, gcc, make, libc6-dev,
#                                          perf), for profiling Jobs (deploy/examples/profile-job.yaml)
#
# Reproducible: the source is `git archive HEAD` (committed files only), every timestamp is the
# commit's (SOURCE_DATE_EPOCH), the Debian packages and the Python packages are pinned
# (packages.txt, constraints.txt), and the layer is normalised (oci.py). Two builds of one commit
# against the same mirror state give the same manifest digest (docs/install.md, "The image").
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PROFILING=0
if [ "${1:-}" = "--profiling" ]; then PROFILING=1; shift; fi
if [ "$PROFILING" = 1 ]; then OUT=${1:-$ROOT/build/image-profiling}; else OUT=${1:-$ROOT/build/image}; fi
MIRROR=${TMC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm

log() { printf '[image] %s\n' "$*" >&2; }

[ "$(id -u)" -eq 0 ] || { log "needs root (mmdebstrap --mode=root uses chroot)"; exit 1; }
command -v mmdebstrap >/dev/null || { log "needs Debian's mmdebstrap (apt-get install mmdebstrap)"; exit 1; }

# The commit to build (TMC_IMAGE_REV, default HEAD): a release is rebuilt from its tag.
REVISION=$(git -C "$ROOT" rev-parse "${TMC_IMAGE_REV:-HEAD}^{commit}")
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct "$REVISION")}
VERSION=$(git -C "$ROOT" show "$REVISION:deploy/helm/tmc/Chart.yaml" | sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')
if ! git -C "$ROOT" diff --quiet "$REVISION" -- . ':!build'; then
    log "note: uncommitted changes are not in the image (it is built from $REVISION)"
fi
# Debian packages, each pinned to a version: a mirror that no longer has it fails the build
# rather than silently making another image.
LISTS=("$HERE/packages.txt")
# The profiling variant: its tools are run in the chroot (the shim and tmctrace are built with
# them, so a toolchain missing a header or valgrind's static libraries fails the build), and its
# tag says which variant it is.
REF=$VERSION
TOOL_CHECK=()
if [ "$PROFILING" = 1 ]; then
    LISTS+=("$HERE/packages-profiling.txt")
    REF=$VERSION-profiling
    TOOL_CHECK=(--customize-hook='for c in "valgrind --version" "gcc --version" "make --version" "perf --version"; do chroot "$1" $c >/dev/null || exit 1; done; chroot "$1" make -s -C /app/profiler-agent/alloc OUT=/tmp/shim-check all tmctrace >/dev/null && rm -rf "$1/tmp/shim-check"')
fi
PACKAGES=$(cat "${LISTS[@]}" | grep -v '^#' | grep -v '^$' | paste -sd, -)

# pip inside the chroot trusts what pip on this machine trusts (a proxy's CA, if any), for the
# build only: the file is removed before the image is packed.
BUILD_CA=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tmc-image.XXXXXX")
# An interrupted build (Ctrl-C, a kill) stops its children and removes what it wrote: the work
# folder and the partial layout; an earlier image in OUT stays as it was.
PARTIAL=$OUT.partial-$$
cleanup() { rm -rf "$WORK" "$PARTIAL"; }
trap cleanup EXIT
trap 'log "interrupted: removing $WORK and $PARTIAL"; kill -- $(jobs -p) 2>/dev/null || true; exit 130' INT TERM
git -C "$ROOT" archive --format=tar "$REVISION" > "$WORK/src.tar"

log "root filesystem: Debian $SUITE + $PACKAGES, tmc $VERSION at $REVISION (epoch $SOURCE_DATE_EPOCH)"
# PIP_*: no byte-code (its files would carry build times), no cache, no version check; the
# editable install keeps alembic.ini and migrations/ where api/migrate.py finds them (/app).
mmdebstrap --variant=minbase --mode=root --include="$PACKAGES" \
    --customize-hook="mkdir -p \"\$1/app\" && tar -C \"\$1/app\" -xf $WORK/src.tar" \
    --customize-hook='chroot "$1" python3 -m venv /opt/tmc' \
    --customize-hook="cp $BUILD_CA \"\$1/tmp/build-ca.crt\"" \
    --customize-hook='chroot "$1" env -i PATH=/usr/bin:/bin HOME=/root PIP_CERT=/tmp/build-ca.crt PIP_DEFAULT_TIMEOUT=180 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PIP_CONSTRAINT=/app/constraints.txt /opt/tmc/bin/pip install -q --no-compile -e "/app[server]"' \
    --customize-hook='rm -f "$1/tmp/build-ca.crt"' \
    --customize-hook='echo "tmc:x:10001:10001:tmc:/nonexistent:/usr/sbin/nologin" >> "$1/etc/passwd"; echo "tmc:x:10001:" >> "$1/etc/group"' \
    --customize-hook='for c in "tmc --help" "tmc-agent --help" "python -m api.bootstrap --help"; do chroot "$1" env PYTHONDONTWRITEBYTECODE=1 /opt/tmc/bin/$c >/dev/null || exit 1; done' \
    --customize-hook='chroot "$1" env PYTHONDONTWRITEBYTECODE=1 /opt/tmc/bin/python -c "import api.app, scheduler.publisher, api.tasks, tmc_agent.serve"' \
    "${TOOL_CHECK[@]}" \
    --customize-hook='find "$1/app" "$1/opt/tmc" -name __pycache__ -prune -exec rm -rf {} +' \
    --customize-hook='rm -f "$1/etc/resolv.conf"; echo tmc > "$1/etc/hostname"' \
    "$SUITE" "$WORK/rootfs.tar" "$MIRROR" >&2

log "packing the OCI layout into $OUT"
python3 "$HERE/oci.py" "$WORK/rootfs.tar" "$PARTIAL" --ref "$REF" --created "$SOURCE_DATE_EPOCH" \
    --env PATH=/opt/tmc/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 \
    --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.revision=$REVISION" \
    --label "org.opencontainers.image.source=deploy/image/build.sh" \
    --user 10001 --workdir /app \
    --cmd tmc serve --host 0.0.0.0 --port 8000 --workers 2
rm -rf "$OUT"
mv "$PARTIAL" "$OUT"
