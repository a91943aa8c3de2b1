"""Task handlers of the AI worker: one per registered task type that has a prompt.

``HANDLERS`` maps a task type to its handler; the worker claims exactly these
task types. ``handlers_for`` builds the same for another registry (a test's).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from durable_ops.ai_worker.handlers.base import Reference, TaskHandler, WorkspaceReader
from durable_ops.ai_worker.prompts import INSTRUCTIONS, prompts_for
from durable_ops.model.tasks import TASKS, Registry


def handlers_for(
    registry: Registry, instructions: Mapping[str, str] = INSTRUCTIONS
) -> Mapping[str, TaskHandler]:
    prompts = prompts_for(registry, instructions)
    return MappingProxyType({name: TaskHandler(prompt) for name, prompt in prompts.items()})


HANDLERS: Mapping[str, TaskHandler] = handlers_for(TASKS)

__all__ = ["HANDLERS", "Reference", "TaskHandler", "WorkspaceReader", "handlers_for"]
