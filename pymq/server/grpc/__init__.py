"""RocketMQ 5 gRPC endpoint (``apache.rocketmq.v2.MessagingService``) over a :class:`pymq.Broker`.

The generated protocol modules come from the official ``rocketmq-python-client`` package
(``rocketmq.grpc_protocol``); install them with ``pip install "pymq-store[server]"``.

    from pymq.server.grpc import GrpcServer, ServerConfig
    server = GrpcServer(broker, ServerConfig(port=8081))
    asyncio.run(server.serve_forever())
"""

from .server_config import ServerConfig

__all__ = ["GrpcServer", "ServerConfig"]


def __getattr__(name: str):
    # grpcio and the protocol modules load with the server itself, not with its config
    if name == "GrpcServer":
        from .server import GrpcServer
        return GrpcServer
    raise AttributeError(name)
