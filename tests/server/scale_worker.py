"""Client processes of the scale test (``test_scale.py``), run as scripts:

    python scale_worker.py producer ENDPOINT TOPIC PREFIX COUNT OUTFILE
    python scale_worker.py consumer ENDPOINT TOPIC GROUP OUTFILE STOPFILE

A producer sends COUNT messages with bodies PREFIX-i, retrying each until the server
accepts it (it may be killed and restarted meanwhile), and writes ``ok <uniq key> <body>``
per receipt. A consumer receives and acks until STOPFILE exists, writing ``ack <uniq key>``
per acknowledged message and ``unsure <uniq key>`` when an ack call failed (the server may
have applied it before it died).
"""

from __future__ import annotations

import logging
import os
import sys
import time

logging.disable(logging.CRITICAL)


def _config(endpoint):
    from rocketmq import ClientConfiguration, Credentials
    return ClientConfiguration(endpoint, Credentials(), request_timeout=3)


def producer(endpoint, topic, prefix, count, outfile) -> None:
    from rocketmq import Message, Producer
    p = Producer(_config(endpoint), (topic,))
    p.startup()
    window = 32
    with open(outfile, "w") as out:
        pending = {}
        i = 0
        while i < count or pending:
            while i < count and len(pending) < window:
                m = Message()
                m.topic = topic
                m.body = f"{prefix}-{i}".encode()
                try:
                    pending[m.body] = p.send_async(m)
                except Exception:
                    time.sleep(0.2)
                    continue
                i += 1
            body, fut = next(iter(pending.items()))
            del pending[body]
            try:
                r = fut.result(timeout=30)
                out.write(f"ok {r.message_id} {body.decode()}\n")
            except Exception:
                # resend until accepted (a new message id; a lost receipt may leave a copy)
                while True:
                    m = Message()
                    m.topic = topic
                    m.body = body
                    try:
                        r = p.send(m)
                        out.write(f"ok {r.message_id} {body.decode()}\n")
                        break
                    except Exception:
                        time.sleep(0.3)
        out.flush()
    p.shutdown()


def consumer(endpoint, topic, group, outfile, stopfile) -> None:
    from rocketmq import FilterExpression, SimpleConsumer
    c = SimpleConsumer(_config(endpoint), group, {topic: FilterExpression("*")}, 5)
    c.startup()
    with open(outfile, "w", buffering=1) as out:
        while not os.path.exists(stopfile):
            try:
                msgs = c.receive(32, 15)
            except Exception:
                time.sleep(0.3)
                continue
            for m in msgs:
                try:
                    c.ack(m)
                    out.write(f"ack {m.message_id}\n")
                except Exception as e:
                    code = getattr(e, "code", None)
                    out.write(f"{'stale' if code == 40013 else 'unsure'} {m.message_id}\n")
    c.shutdown()


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    if kind == "producer":
        producer(rest[0], rest[1], rest[2], int(rest[3]), rest[4])
    else:
        consumer(*rest)
