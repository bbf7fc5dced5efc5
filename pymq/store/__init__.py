"""pymq's store components, one RocketMQ concept per module.

They depend on ``pymq._core``, ``pymq.config``, ``pymq.errors`` and ``pymq.status`` and
never on ``pymq.message_store``, the CLI or Spark.
"""
