"""Where the running ``opsctl up`` serves: ``var/stack.json``, mode 0600.

``opsctl up`` writes it once every child is healthy (atomically: a draft
renamed over it, so a reader never sees half a file) with every gRPC target,
the gateway's URL, the database URL (which may hold a password: hence 0600)
and the AI limits its AI Admission service admits by (``RECORDED_SETTINGS``,
what ``opsctl ai status`` reports), and removes it when it stops. Removed
rather than marked stopped: no reader has a use for a stopped stack's
addresses, and an absent file cannot be misread. A stack killed without a
chance to clean up leaves its file behind; the file names the pid of
``opsctl up``, and a reader ignores it once that process is gone.

A command that talks to a service picks its target by ``choose_target``:
its ``--target`` flag, else the variable (``OPS_OPERATIONS_TARGET``), else
this file, else the setting's default. A command that writes to the database
itself (``opsctl users set-plan``…) picks ``database_url`` the same way, so it
writes where the running stack reads.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from durable_ops.private_files import FILE_MODE, private_directory
from durable_ops.settings import Settings, variable
from durable_ops.stack.binds import TARGETS

STACK_PATH = Path("var") / "stack.json"
# Settings of the running stack a command reports as the stack's own: the caller's
# environment says nothing of what its children were started with.
RECORDED_SETTINGS = ("ai_global_limit", "ai_user_limit")


def write(settings: Settings, gateway_url: str, *, pid: int, path: Path = STACK_PATH) -> None:
    """Record the addresses ``settings`` serves, as dialled from this host (mode 0600)."""
    found: dict[str, Any] = {"pid": pid, "gateway_url": gateway_url}
    found.update({target: getattr(settings, target) for target in TARGETS.values()})
    found["database_url"] = settings.database_url
    found.update({name: getattr(settings, name) for name in RECORDED_SETTINGS})
    private_directory(path.parent)
    draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}.draft")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(descriptor, "w") as out:
            json.dump(found, out, indent=2)
            out.write("\n")
        os.replace(draft, path)
    finally:
        draft.unlink(missing_ok=True)


def remove(*, pid: int, path: Path = STACK_PATH) -> None:
    """Remove the file if it is still this process's (a later ``opsctl up`` may own it now)."""
    found = _load(path)
    if found is not None and found.get("pid") == pid:
        path.unlink(missing_ok=True)


def read(path: Path = STACK_PATH) -> dict[str, Any] | None:
    """The running stack's addresses; None when there is no file, or its stack is gone."""
    found = _load(path)
    if found is None or not isinstance(found.get("pid"), int) or not _alive(found["pid"]):
        return None
    return found


@dataclass(frozen=True)
class Target:
    address: str
    source: str  # how it was chosen, for a message: "--target", "OPS_OPERATIONS_TARGET", …


def choose_target(
    setting: str,
    flag: str | None,
    environ: Mapping[str, str],
    path: Path | None = STACK_PATH,
    *,
    flag_name: str = "--target",
) -> Target:
    """``setting``'s address: the flag, else its variable, else ``path`` (None: no running
    stack is asked), else its default."""
    if flag:
        return Target(flag, flag_name)
    name = variable(setting)
    if environ.get(name):
        return Target(environ[name], name)
    running = None if path is None else read(path)
    if running is not None and isinstance(running.get(setting), str) and running[setting]:
        return Target(running[setting], f"{path}, written by `opsctl up`")
    default = next(f.default for f in fields(Settings) if f.name == setting)
    return Target(str(default), "the default")


def _load(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
