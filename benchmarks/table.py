"""The printed table: one row per figure, with its target and whether it is met."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """``value <op> bound``; ``op`` is ``>=``, ``<=`` or ``==``."""

    op: str
    bound: float

    def met(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.op == ">=":
            return value >= self.bound
        if self.op == "<=":
            return value <= self.bound
        if self.op == "==":
            return value == self.bound
        raise ValueError(f"unknown comparison {self.op!r}")

    def __str__(self) -> str:
        bound = f"{self.bound:g}"
        return {">=": f">= {bound}", "<=": f"<= {bound}", "==": f"= {bound}"}[self.op]


@dataclass(frozen=True)
class Row:
    section: str
    figure: str
    subject: str
    baseline: str
    value: float
    target: Target | None = None
    note: str = ""
    # An absolute figure's unit ("s", "ms", "/s"), shown after the value and the target's
    # bound; ratios have none.
    unit: str = ""

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.target.met(self.value)

    @property
    def verdict(self) -> str:
        if math.isnan(self.value):
            return "n/a"
        met = self.met
        if met is None:
            return "info"
        return "MET" if met else "NOT MET"


def fmt(value: float, digits: int = 2) -> str:
    if math.isinf(value) or math.isnan(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if value == int(value) and abs(value) < 100:
        return f"{int(value)}" if digits == 0 else f"{value:.{digits}f}"
    return f"{value:.{digits}f}"


COLUMNS = ("#", "figure", "subject", "baseline", "value", "target", "verdict")


def _with_unit(text: str, unit: str) -> str:
    if not unit or not text:
        return text
    return text + unit if unit.startswith("/") else f"{text} {unit}"


def _cells(row: Row) -> tuple[str, ...]:
    return (
        row.section,
        row.figure,
        row.subject,
        row.baseline,
        _with_unit(fmt(row.value), row.unit),
        _with_unit(str(row.target), row.unit) if row.target is not None else "",
        row.verdict,
    )


def render_text(header: Sequence[str], rows: Sequence[Row]) -> str:
    cells = [COLUMNS, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = [*header, ""]
    for index, line in enumerate(cells):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    notes = [f"  [{row.section}] {row.note}" for row in rows if row.note]
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines).rstrip() + "\n"


def render_markdown(rows: Sequence[Row]) -> str:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in _cells(row)) + " |")
    notes = [f"- **{row.section}** {row.note}" for row in rows if row.note]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"
