"""Served traffic for the metrics (``pymq.server.metrics.TrafficMetrics``).

Each server has two hooks, None unless ``pymq serve --metrics-port`` set them, so that
nothing is paid without metrics:

* ``in_observer(topic, message_type, messages, nbytes)`` after a successful send (nbytes:
  the records as stored);
* ``out_observer(topic, consumer_group, messages, nbytes)`` after a receive or pull that
  handed messages to a consumer.

``message_type`` is RocketMQ's metrics label: ``normal``, ``fifo``, ``delay``,
``transaction``.
"""

from __future__ import annotations

NORMAL, FIFO, DELAY, TRANSACTION = "normal", "fifo", "delay", "transaction"


def observe(server, hook, *args) -> None:
    """``hook(*args)``; a failure is the server's error to log, never the call's."""
    try:
        hook(*args)
    except Exception as e:          # metrics must never break a call
        server.note_error("metrics", "traffic observer failed", e)
