"""``Admission``: what a gRPC call must pass before its request message is read.

In ``grpc.aio`` a unary handler runs only once its request has been received whole, so a
check made in the handler comes after the bytes are in memory. This interceptor runs on the
call's headers (``handler_call_details.invocation_metadata``), before any message:

- **Credentials.** With an access key configured, an unsigned or badly signed call is
  answered by a stream-request handler that never reads the request: the method's own
  response type with ``status.code = UNAUTHORIZED`` and the reason (the shape the official
  clients read today; gRPC status OK). Whatever the client still sends stays in HTTP/2 flow
  control (one stream window) and is dropped with the stream.
- **A request that does not arrive.** The unary methods (and ReceiveMessage, unary request
  and streamed response) are served as stream-request methods that read their one message
  under a deadline (``first_message_timeout_s``, ``pymq serve --frame-timeout``): a client
  that sends the headers and part of a message, then stalls, gets ``DEADLINE_EXCEEDED``
  and its call slot back (:attr:`ServerConfig.max_concurrent_calls`). A Telemetry stream is
  not bounded so: it is long-lived and idle between commands by design.

An admitted call costs one dict lookup, the signature check when there are credentials,
and a timer around the read (measured in docs/server.md, Limits).
"""

from __future__ import annotations

import asyncio

import grpc
from rocketmq.grpc_protocol import service_pb2 as svc

from .status import Code, status

SERVICE = "apache.rocketmq.v2.MessagingService"
_METHODS = svc.DESCRIPTOR.services_by_name["MessagingService"].methods


def response_types() -> dict[str, type]:
    """``/apache.rocketmq.v2.MessagingService/Method`` -> the method's response class."""
    return {f"/{SERVICE}/{m.name}": getattr(svc, m.output_type.name) for m in _METHODS}


class Admission(grpc.aio.ServerInterceptor):
    """Checks each call's credentials from its headers and bounds the wait for its request.

    ``authenticator``: an :class:`~pymq.server.grpc.auth.Authenticator`, or None (no
    credentials: every call is admitted); ``first_message_timeout_s``: how long a unary
    request may take to arrive once its headers came (0: no limit); ``on_refused(method,
    response)``: called for each refused call (the server's counters and metrics)."""

    def __init__(self, authenticator, first_message_timeout_s: float, on_refused=None) -> None:
        self.authenticator = authenticator
        self.timeout_s = first_message_timeout_s
        self.on_refused = on_refused
        self._types = response_types()
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        if self.authenticator is not None:
            why = self.authenticator.check_pairs(handler_call_details.invocation_metadata)
            if why is not None:
                return self._refusal(method, handler, why)
        if not self.timeout_s:
            return handler
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            wrapped = self._wrapped[method] = self._with_deadline(handler)
        return wrapped

    # -- refused: answer without reading the request ------------------------------------------

    def _refusal(self, method: str, handler, why: str):
        response_type = self._types.get(method)
        if response_type is None:       # not a MessagingService method: gRPC's own refusal
            async def refuse(request_iterator, context):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
            return grpc.stream_unary_rpc_method_handler(refuse)
        response = response_type(status=status(Code.UNAUTHORIZED, why))
        if self.on_refused is not None:
            self.on_refused(method, response)
        if handler.response_streaming:
            async def refuse_stream(request_iterator, context):
                yield response
            return grpc.stream_stream_rpc_method_handler(
                refuse_stream, response_serializer=handler.response_serializer)

        async def refuse_unary(request_iterator, context):
            return response
        return grpc.stream_unary_rpc_method_handler(refuse_unary, response_serializer=handler.response_serializer)

    # -- admitted: the request must arrive in time -------------------------------------------

    def _with_deadline(self, handler):
        """``handler`` with its one request read under the deadline (unary requests only)."""
        if handler.request_streaming:
            return handler
        timeout_s = self.timeout_s

        async def first_message(context):
            request = await read_within(context, timeout_s)
            if request is None:
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                    f"the request message did not arrive within {timeout_s:g} s")
            if request is grpc.aio.EOF:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call carried no request message")
            return request

        if handler.response_streaming:
            behavior = handler.unary_stream

            async def stream(request_iterator, context):
                request = await first_message(context)
                async for item in behavior(request, context):
                    yield item
            return grpc.stream_stream_rpc_method_handler(
                stream, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        behavior = handler.unary_unary

        async def unary(request_iterator, context):
            return await behavior(await first_message(context), context)
        return grpc.stream_unary_rpc_method_handler(
            unary, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


async def read_within(context, timeout_s: float):
    """The call's next request message (``grpc.aio.EOF`` at the end), or None when it did
    not arrive within ``timeout_s``. A timer cancels the read (``asyncio.timeout`` without
    its Python 3.11 requirement): no task is created per call."""
    task = asyncio.current_task()
    expired = []

    def expire() -> None:
        expired.append(True)
        task.cancel()
    timer = asyncio.get_running_loop().call_later(timeout_s, expire)
    try:
        return await context.read()
    except asyncio.CancelledError:
        if not expired:
            raise
        uncancel = getattr(task, "uncancel", None)
        if uncancel is not None:
            uncancel()
        return None
    finally:
        timer.cancel()
