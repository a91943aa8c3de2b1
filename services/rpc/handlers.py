"""Interceptors that swap a call's behaviour keep its handler's shape and codecs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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


def handler_like(
    handler: Any,
    behaviour: Callable[..., Any],
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> Any:
    """A handler of ``handler``'s shape (streaming sides, codecs) running ``behaviour``;
    ``request_deserializer`` replaces its own when given."""
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
        request_deserializer=request_deserializer or handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class SwappingInterceptor(grpc.aio.ServerInterceptor):
    """An interceptor that runs each method's behaviour through ``swap``, once per method:
    the registered handler comes back on every call, and its swapped copy is kept."""

    def __init__(self) -> None:
        self._swapped: dict[str, tuple[Any, Any]] = {}

    def swap(self, method: str, handler: Any) -> Any:
        """The handler that serves ``method`` instead of ``handler``."""
        raise NotImplementedError

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method: str = handler_call_details.method
        known = self._swapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        swapped = self.swap(method, handler)
        self._swapped[method] = (handler, swapped)
        return swapped
