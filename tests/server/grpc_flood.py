"""The attacking client of ``test_grpc_attacks.py``, run as a script in its own process (so
that its copies of 100 MiB requests do not slow the probe, which runs in the test's):

    python grpc_flood.py ENDPOINT TOPIC WAVES SIZE:COUNT [SIZE:COUNT...] [--sign AK SK]

Each wave sends, all at once and each on its own channel, COUNT SendMessage requests of
one message with a SIZE-byte body per SIZE:COUNT; unsigned unless ``--sign``. Prints a JSON
list per wave: each call's response status code (an int) or gRPC error code name.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import grpc

SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"


def _request(topic: str, size: int) -> bytes:
    from rocketmq.grpc_protocol import service_pb2 as svc
    req = svc.SendMessageRequest()
    m = req.messages.add(body=b"\xa5" * size)
    m.topic.name = topic
    m.system_properties.message_id = "ATTACK0001"
    return req.SerializeToString()


def _metadata(sign) -> list:
    md = [("x-mq-client-id", "attacker")]
    if sign:
        from rocketmq.v5.util.signature import Signature
        dt = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        md += [("x-mq-date-time", dt), ("authorization", f"MQv2-HMAC-SHA1 Credential={sign[0]}, "
                                                          f"SignedHeaders=x-mq-date-time, "
                                                          f"Signature={Signature.sign(sign[1], dt)}")]
    return md


def wave(endpoint: str, payloads: list, sign) -> list:
    from rocketmq.grpc_protocol import service_pb2 as svc
    out: list = [None] * len(payloads)

    def one(i: int) -> None:
        with grpc.insecure_channel(endpoint) as ch:
            call = ch.unary_unary(SEND, request_serializer=None,
                                  response_deserializer=svc.SendMessageResponse.FromString)
            try:
                out[i] = call(payloads[i], metadata=_metadata(sign), timeout=30).status.code
            except grpc.RpcError as e:
                out[i] = e.code().name
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(payloads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def main(argv: list) -> None:
    sign = None
    if "--sign" in argv:
        i = argv.index("--sign")
        sign, argv = argv[i + 1:i + 3], argv[:i] + argv[i + 3:]
    endpoint, topic, waves, specs = argv[0], argv[1], int(argv[2]), argv[3:]
    payloads = []
    for spec in specs:
        size, count = (int(x) for x in spec.split(":"))
        payloads += [_request(topic, size)] * count
    for _ in range(waves):
        print(json.dumps(wave(endpoint, payloads, sign)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
