"""Every address the stack listens on, and the one switch that moves them all.

Pure: no sockets here (``preflight`` probes them). Under ``opsctl up`` every
process runs on this host, so each client target follows its bind, and the
local model URL follows the development model while it is the default.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields, replace
from typing import Any

from durable_ops.settings import Settings, SettingsError, variable

# Offsets from --port-base, in the order a reader scans a process list. Every metrics
# bind moves too (when set): one left behind would clash with the same stack run twice
# on two bases, and --port-base promises to move every port.
PORT_OFFSETS = {
    "gateway_bind": 0,
    "operations_bind": 1,
    "notifications_bind": 2,
    "ai_admission_bind": 3,
    "workspace_bind": 4,
    "dev_model_bind": 5,
    "worker_metrics_bind": 6,
    "gateway_metrics_bind": 7,
    "operations_metrics_bind": 8,
    "notifications_metrics_bind": 9,
    "ai_admission_metrics_bind": 10,
    "workspace_metrics_bind": 11,
}
PORT_BASE_MAX = 65535 - max(PORT_OFFSETS.values())
# Which client target each gRPC bind serves.
TARGETS = {
    "operations_bind": "operations_target",
    "notifications_bind": "notifications_target",
    "ai_admission_bind": "ai_admission_target",
    "workspace_bind": "workspace_target",
}
# A wildcard bind is reached on loopback; nothing here binds it.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104


@dataclass(frozen=True)
class Bind:
    setting: str  # a Settings field, e.g. "gateway_bind"
    host: str
    port: int

    @property
    def variable(self) -> str:
        return variable(self.setting)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def dialled(self) -> str:
        """The address a client on this host dials: a wildcard bind is reached on loopback."""
        return replace(self, host=_WILDCARDS.get(self.host, self.host)).address


class BadAddress(SettingsError):
    pass


def parse_address(setting: str, raw: str) -> Bind:
    """``HOST:PORT`` or ``[V6]:PORT`` into a Bind; a clear error naming the variable. The
    host is required: the gateway, the development model and the metrics servers refuse
    ``:PORT``, and ``opsctl up`` refuses it before they would."""
    host, sep, port = raw.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not sep or not port.isdigit() or not 0 < int(port) <= 65535:
        raise BadAddress(
            f"{variable(setting)} must be HOST:PORT with a port 1-65535 (0.0.0.0:PORT for"
            f" every interface), not {raw!r}"
        )
    return Bind(setting, host, int(port))


def stack_binds(settings: Settings) -> list[Bind]:
    """The addresses ``opsctl up`` listens on; each metrics bind only when set."""
    return [
        parse_address(name, getattr(settings, name))
        for name in PORT_OFFSETS
        if getattr(settings, name)
    ]


# What each `opsctl serve` target listens on: its own address (the AI worker has none)
# and its metrics, when set.
SERVE_BINDS = {
    "operations": ("operations_bind", "operations_metrics_bind"),
    "notifications": ("notifications_bind", "notifications_metrics_bind"),
    "ai-admission": ("ai_admission_bind", "ai_admission_metrics_bind"),
    "workspace": ("workspace_bind", "workspace_metrics_bind"),
    "gateway": ("gateway_bind", "gateway_metrics_bind"),
    "dev-model": ("dev_model_bind",),
    "ai-worker": ("worker_metrics_bind",),
}


def serve_binds(settings: Settings, targets: list[str]) -> list[Bind]:
    """The HOST:PORT addresses ``opsctl serve targets…`` listens on; each metrics bind only
    when set. Any other form (port 0: any free port; a gRPC ``unix:`` address) is left to
    the server, which takes it or says why not."""
    found = []
    for name in (name for target in targets for name in SERVE_BINDS[target]):
        with contextlib.suppress(BadAddress):
            if getattr(settings, name):
                found.append(parse_address(name, getattr(settings, name)))
    return found


def clashes(binds: list[Bind]) -> list[tuple[Bind, Bind]]:
    """Pairs of settings that name the same port on the same host."""
    seen: dict[tuple[str, int], Bind] = {}
    found = []
    for bind in binds:
        key = (bind.host, bind.port)
        if key in seen:
            found.append((seen[key], bind))
        else:
            seen[key] = bind
    return found


def with_port_base(settings: Settings, base: int) -> Settings:
    """Every bind of the stack on ``base``, ``base + 1``, …, keeping each host."""
    if not 1 <= base <= PORT_BASE_MAX:
        raise BadAddress(f"--port-base must be between 1 and {PORT_BASE_MAX}, not {base}")
    moved: dict[str, Any] = {
        bind.setting: replace(bind, port=base + PORT_OFFSETS[bind.setting]).address
        for bind in stack_binds(settings)
    }
    return replace(settings, **moved)


def local_to_the_stack(settings: Settings) -> Settings:
    """Targets that reach this host's binds, and the dev model as the default local route."""
    targets: dict[str, Any] = {}
    for bind_name, target_name in TARGETS.items():
        targets[target_name] = parse_address(bind_name, getattr(settings, bind_name)).dialled
    model = parse_address("dev_model_bind", settings.dev_model_bind)
    if settings.ai_local_url == _default("ai_local_url"):
        targets["ai_local_url"] = f"http://{model.dialled}/v1"
    return replace(settings, **targets)


def _default(name: str) -> object:
    return next(f.default for f in fields(Settings) if f.name == name)
