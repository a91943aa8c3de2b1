"""The two structured-output forms a route may speak, and how a refusal of the first looks.

::

    form         response_format sent                              spoken by
    json_schema  {"type": "json_schema",                           OpenAI, llama.cpp's llama-server,
                  "json_schema": {"name", "strict", "schema"}}     vLLM, Ollama (the standard form)
    json_object  {"type": "json_object", "schema": …}              llama-cpp-python's own server,
                                                                   which refuses json_schema

Every route starts on ``json_schema``. ``refuses_json_schema(status, body)``
says whether an error response is the server refusing *that form*, rather than
failing for any other reason. All three must hold:

1. the status is 400, 422 or 500: the statuses servers give a request field
   they do not accept (400 OpenAI and vLLM, 422 FastAPI's validation, 500
   llama-cpp-python, whose route wrapper turns its validation error into a
   500). Never 401/403/404 (key, model, path), 429, 502 to 504 (overload), which
   say nothing about the request's fields;
2. the body names the field and the value: ``response_format`` and
   ``json_schema``;
3. it refuses the value: it lists ``json_object`` as what it takes instead
   (pydantic's ``Input should be 'text' or 'json_object'``, old llama-server's
   ``response_format type must be one of "text" or "json_object"``), or says
   the *type* ``json_schema`` is not supported (OpenAI's ``'response_format'
   of type 'json_schema' is not supported with this model``).

A crashed or overloaded server (``llama_decode failed``, ``out of memory``,
``model is loading``) fails (2) or (3); a server that takes json_schema but not
a keyword of our schema (``unsupported keyword maxLength``) fails (3), so it is
an ordinary error and no fallback hides it. Our json_schema request itself
never contains ``json_object``, so a server that echoes the request in its
error does not pass (3) by echoing.

The client then asks once more in ``json_object`` form, and keeps that form for
the route only when the server accepts it (``ModelClient``): a misread error
costs one extra request, never a route stuck on the weaker form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class ResponseFormat(StrEnum):
    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"


REFUSAL_STATUSES = frozenset({400, 422, 500})
# Read at most this much of an error body: refusals are short, and a huge body is no refusal.
REFUSAL_BODY_BYTES = 64 * 1024

# "type 'json_schema' is not supported", "unsupported response_format type: json_schema":
# the *type* is refused, not a keyword inside the schema ("json_schema: unsupported maxLength").
_NOT_SUPPORTED = re.compile(
    r"type\W{0,3}json_schema\W{0,3}(?:is\s+)?(?:not\s+supported|unsupported)"
    r"|unsupported\s+(?:response_format\s+)?type\W{0,3}json_schema"
)


def response_format(form: ResponseFormat, name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The ``response_format`` member of a chat-completions request in ``form``."""
    if form is ResponseFormat.JSON_OBJECT:
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def refuses_json_schema(status: int, body: bytes) -> bool:
    """Whether an error response refuses the ``json_schema`` form (the module's rules)."""
    if status not in REFUSAL_STATUSES or len(body) > REFUSAL_BODY_BYTES:
        return False
    text = body.decode("utf-8", errors="replace").lower()
    if "response_format" not in text or "json_schema" not in text:
        return False
    return "json_object" in text or _NOT_SUPPORTED.search(text) is not None
