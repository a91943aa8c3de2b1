"""durable-ops: durable, owner-scoped long-running operations."""
