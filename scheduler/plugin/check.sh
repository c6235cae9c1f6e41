#!/usr/bin/env bash
# The plugin's gates for ./dev test: build tmc-scheduler, check that the committed CRD, JSON Schema
# and deep-copy functions are what the API types generate, then go test, go vet and gofmt, with the
# control plane's toolchain and caches (tests/scheduler/controlplane/build.sh provides them, and
# installs Go from PyPI on a machine that has none). Every gate can fail the run.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${TMC_K8S_CACHE:-$HOME/.cache/tmc-k8s}

bash "$HERE/../../tests/scheduler/controlplane/build.sh" >/dev/null
bash "$HERE/build.sh" >/dev/null
bash "$HERE/generate.sh" --check
GO=$(command -v go || echo "$CACHE/go-venv/bin/go")
export GOMODCACHE=$CACHE/gomodcache GOCACHE=$CACHE/gocache GOPATH=$CACHE/gopath
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
cd "$HERE"
"$GO" test -count=1 ./...
"$GO" vet ./...
unformatted=$("$("$GO" env GOROOT)/bin/gofmt" -l .)
if [ -n "$unformatted" ]; then
    echo "gofmt: these files need formatting: $unformatted" >&2
    exit 1
fi
