"""The development model: a deterministic OpenAI-compatible server, the default
local route of ``opsctl up`` and the misbehaving model of fault drills.
"""

from durable_ops.dev_model.app import DEFAULT_MODEL, DevModelConfig, FailMode, create_app
from durable_ops.dev_model.server import parse_bind, run

__all__ = ["DEFAULT_MODEL", "DevModelConfig", "FailMode", "create_app", "parse_bind", "run"]
