"""Which model made a result: provider, model and route, bounded as stored (SPEC §3). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from durable_ops.model.bounds import MODEL_MAX, PROVIDER_MAX, ROUTE_MAX


@dataclass(frozen=True)
class Provenance:
    """Bounded like the operation columns that store it (SPEC §3)."""

    provider: str
    model: str
    route: str

    def __post_init__(self) -> None:
        for name, value, limit in (
            ("provider", self.provider, PROVIDER_MAX),
            ("model", self.model, MODEL_MAX),
            ("route", self.route, ROUTE_MAX),
        ):
            if not value or len(value) > limit:
                raise ValueError(f"{name} must be 1 to {limit} characters")
