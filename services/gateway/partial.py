"""The fields of a structured answer present so far, from the JSON prefix a model wrote.

A running attempt's draft is the start of a JSON object. ``jiter`` parses such
a prefix (``partial_mode="trailing-strings"``): every complete field, and the
string being written cut where it stands, so the page shows a summary as it
grows and each strength, gap and next step as it arrives. Anything that is
not the start of an object shows nothing yet.
"""

from __future__ import annotations

from typing import Any

import jiter


def fields_so_far(text: str) -> dict[str, Any] | None:
    """The object ``text`` begins, as far as it goes; None while there is none."""
    try:
        parsed = jiter.from_json(text.encode(), partial_mode="trailing-strings")
    except ValueError:  # empty, or not JSON at all
        return None
    return parsed if isinstance(parsed, dict) else None
