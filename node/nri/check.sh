#!/usr/bin/env bash
# The NRI plugin's gates for ./dev test: go test, go vet and gofmt, with the control plane's Go
# toolchain and caches (tests/scheduler/controlplane/build.sh installs Go from PyPI on a machine
# that has none; the plugin shares most modules with the scheduler's). Every gate can fail the run.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${TMC_K8S_CACHE:-$HOME/.cache/tmc-k8s}
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
