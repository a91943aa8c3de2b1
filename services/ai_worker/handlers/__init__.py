"""Task handlers of the AI worker: one per registered AI task type.

``HANDLERS`` maps a task type to its handler; the worker claims exactly the
task types that are both in the task registry (``durable_ops.model.tasks``) and
here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from durable_ops.ai_worker.handlers.base import Inputs, References, TaskHandler, WorkspaceReader
from durable_ops.ai_worker.handlers.cv_review import CV_REVIEW
from durable_ops.ai_worker.handlers.strategy_snapshot import STRATEGY_SNAPSHOT

HANDLERS: Mapping[str, TaskHandler] = MappingProxyType(
    {handler.task_type: handler for handler in (STRATEGY_SNAPSHOT, CV_REVIEW)}
)

__all__ = ["HANDLERS", "Inputs", "References", "TaskHandler", "WorkspaceReader"]
