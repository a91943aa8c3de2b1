"""Interceptors that swap a call's behaviour keep its handler's shape and codecs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc


def behaviour_of(handler: Any) -> Callable[..., Any]:
    """The servicer method behind an ``RpcMethodHandler``."""
    if handler.request_streaming and handler.response_streaming:
        return handler.stream_stream  # type: ignore[no-any-return]
    if handler.request_streaming:
        return handler.stream_unary  # type: ignore[no-any-return]
    if handler.response_streaming:
        return handler.unary_stream  # type: ignore[no-any-return]
    return handler.unary_unary  # type: ignore[no-any-return]


def handler_like(handler: Any, behaviour: Callable[..., Any]) -> Any:
    """A handler of ``handler``'s shape (streaming sides, codecs) running ``behaviour``."""
    if handler.request_streaming and handler.response_streaming:
        factory = grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        factory = grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        factory = grpc.unary_stream_rpc_method_handler
    else:
        factory = grpc.unary_unary_rpc_method_handler
    return factory(
        behaviour,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
