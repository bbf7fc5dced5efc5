"""RocketMQ 4.x's remoting protocol for ``pymq serve``: a name server and a broker.

4.x clients (Java, Go, C++, Node's ali-ons, ...) configured with
``namesrvAddr=127.0.0.1:9876`` find their topics through the name server role, then send,
pull (long polling), commit offsets, retry and dead-letter, lock queues and query messages
through the broker role on port 10911. Both roles serve the same :class:`pymq.Broker` as
the gRPC endpoint, so 4.x and 5.x clients share one store. See docs/remoting.md.
"""

from .server import RemotingConfig, RemotingServer, bind_listeners

__all__ = ["RemotingConfig", "RemotingServer", "bind_listeners"]
