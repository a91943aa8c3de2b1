"""Undo ``durable_ops.logs.configure_logging`` after a test that ran it."""

from __future__ import annotations

import logging

import structlog


def reset_logging() -> None:
    """structlog's defaults again, and the root logger without the product's handler."""
    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == "durable-ops"]:
        root.removeHandler(handler)
