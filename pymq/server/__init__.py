"""Protocol adapters in front of a :class:`pymq.Broker`.

``pymq.server.grpc`` serves RocketMQ 5's gRPC protocol (``apache.rocketmq.v2``), the one the
official 5.x clients speak to a RocketMQ proxy. Adapters only translate: every decision about
messages, queues, groups and transactions is the broker's. Nothing below ``pymq.broker``
imports this package.
"""
