"""The node agent's configuration, read once from flags and the environment into one typed object.

Every name below is part of the agent's interface (the Helm chart and the control-plane tests set
them); numbers are parsed with bounds, and a bad value is one clear error naming the variable.

| environment                      | meaning                                              |
|----------------------------------|------------------------------------------------------|
| TMC_AGENT_NODE_NAME              | this node (downward API `spec.nodeName`); `--node`   |
| TMC_AGENT_PLAN_DIR               | host directory of the plan files pods mount          |
| TMC_AGENT_HOST_KIND              | the host kind label, instead of the derived one      |
| TMC_AGENT_SLOW_POOL(_BYTES)      | the rack pool slow memory comes from, and its size   |
| TMC_AGENT_INTERVAL               | seconds between passes; `--interval`                 |
| TMC_AGENT_PUBLISH_EVERY          | passes between capacity re-publications              |
| TMC_AGENT_SERVICEACCOUNT_DIR     | the API server credentials (token, ca.crt)           |
| TMC_AGENT_SERVICE_URL            | tmc's service, for uploads; `--service`              |
| TMC_AGENT_PROJECTED_TOKEN_FILE   | the pod's service-account token for tmc's service    |
| TMC_AGENT_TOKEN_FILE             | file holding the agent's bearer token (a Secret)     |
| TMC_AGENT_TOKEN                  | the token itself, when there is no file              |
| TMC_AGENT_SPOOL                  | profiles waiting for upload                          |
| TMC_AGENT_SHIM_DIR               | host directory the shim is installed into for pods   |
| TMC_AGENT_NRI                    | "true": runs are held to tmc-nri's creation records  |
| TMC_AGENT_PLACEMENT_SEAL_KEYS    | the placement seal's keys: only sealed runs reported |
| TMC_AGENT_PLACEMENT_SEAL_ACCEPT_UNSEALED | "true": a run with no seal at all is reported too |
| TMC_AGENT_SYS/PROC/RESCTRL/CGROUP| host roots (`HostPaths.from_env`)                    |

Which token the agent sends to tmc's service, first that exists: the projected service-account
token (the kubelet's, bound to the agent's pod and so to its node, rotated before it expires),
then the tmc token's file, then the tmc token itself. The projected token is what lets the
service know the agent's node; the tmc token is for where there is none (outside Kubernetes).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tmc_agent.hostpaths import HostPaths

DEFAULT_PLAN_DIR = Path("/var/lib/tmc/plans")
SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_TOKEN_BYTES = 4096


class SettingsError(ValueError):
    """A setting is missing or out of range; the message names the variable and the fix."""


def _number(env: Mapping[str, str], name: str, default: float, lo: float, hi: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw[:40]!r} is not a number") from None
    if not math.isfinite(value) or not lo <= value <= hi:
        raise SettingsError(f"{name}={raw[:40]!r} is outside {lo:g}..{hi:g}")
    return value


def _integer(env: Mapping[str, str], name: str, lo: int, hi: int) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    if not raw.strip().isdigit() or len(raw.strip()) > 20:
        raise SettingsError(f"{name}={raw[:40]!r} is not a whole number of bytes")
    value = int(raw)
    if not lo <= value <= hi:
        raise SettingsError(f"{name}={raw[:40]!r} is outside {lo}..{hi}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise SettingsError(f"{name}={raw[:40]!r} is not true or false")


def _token_file(name: str, path: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise SettingsError(f"{name}={path}: {exc.strerror}") from None
    if len(data) > MAX_TOKEN_BYTES:
        raise SettingsError(f"{name}={path}: longer than a token can be")
    token = data.decode(errors="replace").strip()
    if not token:
        raise SettingsError(f"{name}={path} is empty")
    return token


def read_token(env: Mapping[str, str]) -> str | None:
    """The agent's bearer token for tmc's service, read when asked (files are rotated: the
    kubelet replaces a projected token before it expires, a Secret may be changed): the
    projected service-account token named by TMC_AGENT_PROJECTED_TOKEN_FILE when that file
    exists, else the file named by TMC_AGENT_TOKEN_FILE, else TMC_AGENT_TOKEN, else None."""
    projected = env.get("TMC_AGENT_PROJECTED_TOKEN_FILE")
    if projected and os.path.exists(projected):
        return _token_file("TMC_AGENT_PROJECTED_TOKEN_FILE", projected)
    path = env.get("TMC_AGENT_TOKEN_FILE")
    if path:
        return _token_file("TMC_AGENT_TOKEN_FILE", path)
    return env.get("TMC_AGENT_TOKEN") or None


@dataclass(frozen=True)
class AgentSettings:
    """What `tmc-agent serve` runs with."""

    node_name: str
    paths: HostPaths = field(default_factory=HostPaths)
    # Host directory the pods mount read-only; a pod's shim reads `<plan_dir>/<pod uid>.plan`.
    plan_dir: Path = DEFAULT_PLAN_DIR
    host_kind: str | None = None  # overrides the kind derived from the slow tier
    slow_pool: str | None = None  # the rack pool this node draws slow memory from, if any
    slow_pool_bytes: int | None = None
    interval_seconds: float = 10.0
    publish_every: int = 30  # passes between capacity re-publications
    serviceaccount_dir: Path = SERVICEACCOUNT_DIR
    service_url: str | None = None  # tmc's service: spooled profiles are uploaded there
    # The pod's service-account token for tmc's service (the chart's projected volume): sent
    # when the file exists, in place of the tmc token below.
    projected_token_file: Path | None = None
    token_file: Path | None = None
    token: str | None = None  # only when there is no token file
    spool_dir: Path | None = None
    # Host directory pods mount read-only to preload the allocator shim (`<dir>/libtmcalloc.so`).
    shim_dir: Path | None = None
    # The node's container runtime runs tmc-nri's plugin, which applies each placed container's
    # configuration at its creation and records it (`<plan_dir>/applied`): a verification run
    # is then reported only for a pod whose containers it recorded as started with their
    # configuration applied. Otherwise tmc-nri reconcile applies placements to running pods and
    # records nothing, and runs are reported as before it. The agent applies nothing either way.
    nri: bool = False
    # The keys tmc's scheduler seals placements with (a mounted Secret): a run is reported only
    # for a pod whose placement's seal verifies. None: sealing off.
    placement_seal_keys: Path | None = None
    # A placement with no seal at all counts too (the upgrade from a release that did not seal).
    placement_seal_accept_unsealed: bool = False

    def service_token(self) -> str | None:
        """The token for tmc's service, read now: the projected token is rotated by the kubelet,
        a mounted Secret may be changed (see read_token for which one is sent)."""
        env = {"TMC_AGENT_TOKEN_FILE": str(self.token_file)} if self.token_file else {}
        if self.projected_token_file:
            env["TMC_AGENT_PROJECTED_TOKEN_FILE"] = str(self.projected_token_file)
        if self.token:
            env["TMC_AGENT_TOKEN"] = self.token
        return read_token(env)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        node_name: str | None = None,
        interval_seconds: float | None = None,
        service_url: str | None = None,
    ) -> AgentSettings:
        """Flags (the keyword arguments) win over the environment; see the module's table."""
        env = os.environ if env is None else env
        name = node_name or env.get("TMC_AGENT_NODE_NAME")
        if not name:
            raise SettingsError(
                "no node name: set TMC_AGENT_NODE_NAME (downward API spec.nodeName) or --node"
            )
        interval = (
            interval_seconds
            if interval_seconds is not None
            else _number(env, "TMC_AGENT_INTERVAL", 10.0, 0.05, 86_400.0)
        )
        if not math.isfinite(interval) or not 0.05 <= interval <= 86_400.0:
            raise SettingsError(f"--interval {interval} is outside 0.05..86400 seconds")
        url = service_url or env.get("TMC_AGENT_SERVICE_URL") or None
        if url is not None and not url.startswith(("http://", "https://")):
            raise SettingsError(f"TMC_AGENT_SERVICE_URL={url[:60]!r} is not an http(s) URL")
        token_file = env.get("TMC_AGENT_TOKEN_FILE") or None
        projected = env.get("TMC_AGENT_PROJECTED_TOKEN_FILE") or None
        spool = env.get("TMC_AGENT_SPOOL") or None
        shim_dir = env.get("TMC_AGENT_SHIM_DIR") or None
        seal_keys = env.get("TMC_AGENT_PLACEMENT_SEAL_KEYS") or None
        return cls(
            node_name=name,
            paths=HostPaths.from_env(),
            plan_dir=Path(env.get("TMC_AGENT_PLAN_DIR") or DEFAULT_PLAN_DIR),
            host_kind=env.get("TMC_AGENT_HOST_KIND") or None,
            slow_pool=env.get("TMC_AGENT_SLOW_POOL") or None,
            slow_pool_bytes=_integer(env, "TMC_AGENT_SLOW_POOL_BYTES", 1, 1 << 60),
            interval_seconds=interval,
            publish_every=int(_number(env, "TMC_AGENT_PUBLISH_EVERY", 30, 1, 1_000_000)),
            serviceaccount_dir=Path(
                env.get("TMC_AGENT_SERVICEACCOUNT_DIR") or str(SERVICEACCOUNT_DIR)
            ),
            service_url=url.rstrip("/") if url else None,
            projected_token_file=Path(projected) if projected else None,
            token_file=Path(token_file) if token_file else None,
            token=env.get("TMC_AGENT_TOKEN") or None,
            spool_dir=Path(spool) if spool else None,
            shim_dir=Path(shim_dir) if shim_dir else None,
            nri=_flag(env, "TMC_AGENT_NRI"),
            placement_seal_keys=Path(seal_keys) if seal_keys else None,
            placement_seal_accept_unsealed=_flag(env, "TMC_AGENT_PLACEMENT_SEAL_ACCEPT_UNSEALED"),
        )
