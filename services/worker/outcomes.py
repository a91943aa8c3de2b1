"""What a handler's return may say besides a result reference: the model that made it."""

from __future__ import annotations

from dataclasses import dataclass

from durable_ops.api.operations.v1 import operations_pb2 as pb
from durable_ops.model.provenance import Provenance


@dataclass(frozen=True)
class Completed:
    """A handler's finished work: the result's reference and, optionally, its provenance."""

    result_ref: str = ""
    provenance: Provenance | None = None


def completed(returned: str | Completed | None) -> Completed:
    """A handler's return value as a completion (a string is the result's reference)."""
    if isinstance(returned, Completed):
        return returned
    return Completed(result_ref=returned or "")


def provenance_to_pb(provenance: Provenance | None) -> pb.Provenance:
    if provenance is None:
        return pb.Provenance()
    return pb.Provenance(
        provider=provenance.provider, model=provenance.model, route=provenance.route
    )
