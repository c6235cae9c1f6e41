"""A pod's spec as a kubelet would run it, on this machine: its volumes as directories, its
"images" as directories, its containers' environment resolved and their commands with `$(VAR)`
expanded and every path inside the container mapped to where it is here.

Used by tests/agent/test_profile_job.py (the profiling Job's command on a fake host) and by the
control plane's pod runner (tests/scheduler/controlplane/kwok.py), which runs the pods bound to
kwok's nodes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

VAR = re.compile(r"\$\((\w+)\)")


class Unsupported(ValueError):
    """Something in the spec a test's kubelet does not do (it says what)."""


def expand(value: str, env: dict[str, str]) -> str:
    """$(VAR) replaced by env's value, as the kubelet does; an unknown reference stays as is."""
    return VAR.sub(lambda m: env.get(m.group(1), m.group(0)), value)


class Pod:
    """The pod template `spec` with its volumes as directories: `volumes[name]` when given (a
    hostPath's place on a fake host, a Secret written out), else `root/volumes/<name>`. A
    container's image is `images[image]` when given, a directory holding the files the command
    reads from the image; everything else in the image is this machine's (the project's
    virtualenv for tmc's commands). `/tmp` is the container's own, under `root`."""

    def __init__(
        self,
        spec: dict[str, Any],
        root: Path,
        volumes: dict[str, Path] | None = None,
        images: dict[str, Path] | None = None,
    ) -> None:
        self.spec = spec
        self.root = root
        self.volumes = {v["name"]: v for v in spec.get("volumes", [])}
        self.places = volumes or {}
        self.images = images or {}

    def volume_dir(self, name: str) -> Path:
        return self.places.get(name, self.root / "volumes" / name)

    def mounts(self, container: dict[str, Any]) -> list[tuple[str, Path]]:
        out = []
        for m in container.get("volumeMounts", []):
            assert m["name"] in self.volumes, f"{m['name']} is mounted but not a volume"
            out.append((m["mountPath"], self.volume_dir(m["name"])))
        out.append(("/tmp", self.root / "tmp"))
        # Longest mount path first, as the container's filesystem resolves them.
        return sorted(out, key=lambda m: -len(m[0]))

    def host_path(self, container: dict[str, Any], path: str) -> str:
        for mount, where in self.mounts(container):
            if path == mount or path.startswith(mount + "/"):
                where.mkdir(parents=True, exist_ok=True)
                return str(where) + path[len(mount) :]
        image = self.images.get(str(container.get("image", "")))
        if image is not None and path.startswith("/") and (image / path.lstrip("/")).exists():
            return str(image) + path  # as written: `cp -a DIR/. TO` copies DIR's contents
        return path

    def environment(self, container: dict[str, Any], fields: dict[str, str]) -> dict[str, str]:
        """The container's env as the kubelet resolves it: values with $(VAR) of the entries
        before them expanded, the downward API's `fieldRef` from `fields` (e.g. metadata.uid)."""
        env: dict[str, str] = {}
        for entry in container.get("env", []):
            name = entry["name"]
            if "value" in entry:
                env[name] = expand(str(entry["value"]), env)
                continue
            ref = (entry.get("valueFrom") or {}).get("fieldRef") or {}
            path = ref.get("fieldPath")
            if path not in fields:
                raise Unsupported(f"env {name}: only values and fieldRef {sorted(fields)}")
            env[name] = fields[path]
        return env

    def argv(self, container: dict[str, Any], env: dict[str, str]) -> list[str]:
        """The command and args with $(VAR) expanded (as the kubelet does) and paths mapped."""
        out = []
        for raw in [*container.get("command", []), *container.get("args", [])]:
            arg = expand(raw, env)
            if "=" in arg and arg.startswith("--"):
                flag, _, value = arg.partition("=")
                out.append(f"{flag}={self.host_path(container, value)}")
            else:
                out.append(self.host_path(container, arg))
        return out
