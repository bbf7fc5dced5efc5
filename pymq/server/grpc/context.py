"""What every call carries: the client's id and language from the request headers, the
peer address, and the deadline; checked against the server's credentials first."""

from __future__ import annotations

import dataclasses
from typing import Optional

from .status import Code, RequestError


@dataclasses.dataclass
class CallContext:
    """The headers RocketMQ 5 clients send with every call (``x-mq-client-id``,
    ``x-mq-language``, ``x-mq-namespace``...) and the peer's address."""

    client_id: str
    metadata: dict
    peer: str
    grpc_context: object

    @property
    def namespace(self) -> str:
        return self.metadata.get("x-mq-namespace", "")

    @property
    def peer_host(self) -> str:
        """The client's address as ``host:port`` (``ipv4:`` / ``ipv6:`` prefix removed)."""
        p = self.peer
        for prefix in ("ipv4:", "ipv6:"):
            if p.startswith(prefix):
                p = p[len(prefix):]
        if p.startswith("[") and "]:" in p:
            p = p[1:].replace("]:", ":", 1)
        return p

    def require_client_id(self) -> str:
        """The client id, or CLIENT_ID_REQUIRED."""
        if not self.client_id:
            raise RequestError(Code.CLIENT_ID_REQUIRED, "x-mq-client-id header is required")
        return self.client_id

    def time_remaining(self) -> Optional[float]:
        """Seconds until the call's deadline, or None without one."""
        return self.grpc_context.time_remaining()


def make_context(grpc_context, authenticator=None) -> CallContext:
    """The :class:`CallContext` of a call; with an ``authenticator``, raises UNAUTHORIZED
    when the call is not signed with one of its keys (the server checks before the request
    is read, in :mod:`.admission`, and passes none here)."""
    md = {}
    for k, v in grpc_context.invocation_metadata() or ():
        if isinstance(v, bytes):
            continue
        md[k] = v
    if authenticator is not None:
        why = authenticator.check(md)
        if why is not None:
            raise RequestError(Code.UNAUTHORIZED, why)
    return CallContext(md.get("x-mq-client-id", ""), md, grpc_context.peer() or "", grpc_context)
