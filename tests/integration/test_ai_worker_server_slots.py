"""How many answers the local model server computes at once, read at start-up
(``ai_worker.server_slots``) from a real loopback server standing for llama-server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette import routing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from durable_ops.ai_worker.server_slots import read_server_slots, server_root
from tests.integration.test_inference_client import serving

SLOTS = [{"id": 0}, {"id": 1}, {"id": 2}]


def _server(props_status: int, props: Any) -> Starlette:
    """``/props`` answering ``props`` with ``props_status``; ``/slots`` listing three slots;
    the OpenAI API beside them under ``/v1``, where neither is."""

    async def read_props(request: Request) -> Response:
        if isinstance(props, str):  # not JSON at all: another server's page
            return PlainTextResponse(props, status_code=props_status)
        return JSONResponse(props, status_code=props_status)

    async def read_slots(request: Request) -> JSONResponse:
        return JSONResponse(SLOTS)

    return Starlette(
        routes=[routing.Route("/props", read_props), routing.Route("/slots", read_slots)]
    )


@pytest.mark.parametrize(
    ("props_status", "props", "slots"),
    [
        (200, {"total_slots": 4}, 4),
        (404, {"total_slots": 4}, 3),  # a refusal says nothing, whatever its body
        (200, {"model": "other"}, 3),
        (200, "<html>a proxy's page</html>", 3),
    ],
    ids=["props", "props-refused", "props-without-slots", "props-not-json"],
)
def test_the_slot_count_is_read_beside_the_openai_api(
    props_status: int, props: Any, slots: int
) -> None:
    with serving(_server(props_status, props)) as url:
        assert url.endswith("/v1")
        assert asyncio.run(read_server_slots(url)) == slots


def test_the_server_root_is_where_the_openai_api_is_mounted() -> None:
    assert server_root("http://model:8081/v1/") == "http://model:8081"
    assert server_root("http://model:8081") == "http://model:8081"
