"""Probes made of the official RocketMQ clients, for the hostile-client tests (issue 24).

A probe is started once, then ``round()`` sends one message with a unique body, reads that
message back and returns the seconds it took (wall clock, measured here), raising
:class:`ProbeError` when the round fails or takes longer than its ``timeout`` (10 s). Both
are context managers::

    with JavaRemotingProbe(server.listening["namesrv"], home=home, classes=classes) as probe:
        seconds = probe.round()                 # probe.last: the round's details

* :class:`JavaRemotingProbe`: the official Java 4.9.7 client (``tests/java/LatencyProbe.java``,
  a ``DefaultMQProducer`` and a ``DefaultMQPullConsumer`` in one long-lived JVM, signing with
  ``AclClientRPCHook`` when given keys) over the 4.x remoting protocol, through the name server.
  :func:`compile_latency_probe` compiles it once per process.
* :class:`GrpcClientProbe`: the official Python 5.x client (``rocketmq.v5``: a ``Producer``
  and a ``SimpleConsumer`` that acks what it reads) over gRPC.

Messages a round did not send (other probes', earlier rounds') are skipped; the gRPC probe
acks them so they do not come back.
"""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from typing import Optional

from real_rocketmq import JDK17_OPENS  # tests/ is on sys.path

SOURCE = pathlib.Path(__file__).resolve().parent.parent / "java" / "LatencyProbe.java"
ROUND_TIMEOUT = 10.0

_compiled: dict[str, pathlib.Path] = {}
_compile_lock = threading.Lock()


class ProbeError(RuntimeError):
    """A probe's round (or its start) failed; ``code`` is the error code the client gave,
    if any (remoting: the broker's ``ResponseCode`` or the Java client's ``ClientErrorCode``;
    gRPC: the server's ``Code``)."""

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code


class ProbeTimeout(ProbeError):
    """A round did not complete within the probe's timeout."""


def compile_latency_probe(home: pathlib.Path, out_dir: Optional[pathlib.Path] = None) -> pathlib.Path:
    """The directory of the compiled ``LatencyProbe`` classes for the distribution ``home``,
    compiled with ``javac`` against ``home/lib/*`` at the first call of the process (into
    ``out_dir``, else a temporary directory) and reused after."""
    key = str(pathlib.Path(home).resolve())
    with _compile_lock:
        if key in _compiled:
            return _compiled[key]
        out = pathlib.Path(out_dir) if out_dir else pathlib.Path(tempfile.mkdtemp(prefix="latency-probe-"))
        out.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(["javac", "-nowarn", "-Xlint:none", "-encoding", "UTF-8", "-cp", f"{key}/lib/*",
                            "-d", str(out), str(SOURCE)], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"javac LatencyProbe.java failed:\n{p.stdout}\n{p.stderr}")
        _compiled[key] = out
        return out


def latency_summary(seconds: list[float]) -> str:
    """``n=.. p50=..ms max=..ms`` of round durations."""
    if not seconds:
        return "n=0"
    ordered = sorted(seconds)
    return (f"n={len(ordered)} p50={ordered[len(ordered) // 2] * 1000:.1f}ms "
            f"max={ordered[-1] * 1000:.1f}ms")


def _code(error: Exception) -> Optional[int]:
    """The ``code`` of a client exception (grpc's errors have a ``code()`` method instead)."""
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


def _unique_body(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class JavaRemotingProbe:
    """The official Java 4.9.7 client in one JVM, driven over its stdin and stdout.

    ``namesrv`` is ``"host:port"`` (or a ``(host, port)`` pair) of the name server; with
    ``access_key`` and ``secret_key`` every request is signed. ``home`` is the RocketMQ
    distribution (``tests/real_rocketmq.find_rocketmq_home``), ``classes`` the output of
    :func:`compile_latency_probe` (compiled here when not given). Starting waits for the JVM's
    warm-up round (``start_timeout``) and raises :class:`ProbeError` if it failed. ``rounds``
    holds every completed round's seconds, ``last`` the JVM's report of the last one
    (``send_ms``, ``receive_ms``, ``total_ms``, ``body``, ``queueId``, ``queueOffset``,
    ``msgId``, ``sentMsgId``) plus ``sent`` (the body sent) and ``seconds``.

    The client retries a failed send but not a pull, and a server closing a connection as
    idle (``--idle-timeout``) just as a round uses it fails that round (seen with rounds
    about as far apart as the idle timeout): run rounds more often than the idle timeout.
    """

    def __init__(self, namesrv, topic: str = "JavaProbeTopic", group: str = "java_probe_group",
                 access_key: Optional[str] = None, secret_key: Optional[str] = None, *,
                 home: pathlib.Path, classes: Optional[pathlib.Path] = None,
                 timeout: float = ROUND_TIMEOUT, start_timeout: float = 60.0, jvm_options: tuple = ()) -> None:
        self.jvm_options = tuple(jvm_options)      # e.g. ("-Dtls.enable=true",): the client speaks TLS
        self.namesrv = namesrv if isinstance(namesrv, str) else f"{namesrv[0]}:{namesrv[1]}"
        self.topic, self.group = topic, group
        self.keys = (access_key, secret_key) if access_key else None
        self.home, self.classes = pathlib.Path(home), classes
        self.timeout, self.start_timeout = timeout, start_timeout
        self.proc: Optional[subprocess.Popen] = None
        self.work: Optional[pathlib.Path] = None
        self.lines: queue.Queue = queue.Queue()
        self.reader: Optional[threading.Thread] = None
        self._stderr = None
        self.seq = 0
        self.rounds: list[float] = []
        self.last: dict = {}
        self.warmup: dict = {}

    def __enter__(self) -> "JavaRemotingProbe":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "JavaRemotingProbe":
        """Start the JVM; return once its warm-up round completed."""
        classes = self.classes or compile_latency_probe(self.home)
        self.work = pathlib.Path(tempfile.mkdtemp(prefix="java-probe-"))
        cmd = ["java", "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *JDK17_OPENS,
               f"-Duser.home={self.work}", f"-Drocketmq.client.logRoot={self.work / 'logs'}", *self.jvm_options,
               "-cp", f"{classes}:{self.home}/lib/*", "LatencyProbe", self.namesrv, self.topic, self.group,
               *(self.keys or ())]
        self._stderr = open(self.work / "stderr.log", "wb")
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                         text=True, encoding="utf-8")
        except OSError:
            self.close()
            raise
        self.reader = threading.Thread(target=self._read, name="java-probe-reader", daemon=True)
        self.reader.start()
        try:
            ready = self._next(lambda m: "ready" in m, self.start_timeout, "the JVM's warm-up round")
            if not ready["ready"]:
                raise ProbeError(f"the Java probe did not start: {ready.get('error')}", ready.get("code"))
        except BaseException:
            self.close()
            raise
        self.warmup = ready
        return self

    def _read(self) -> None:
        """Reader thread: every JSON line of the JVM's stdout into ``lines``; None at EOF."""
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    self.lines.put(json.loads(line))
                except ValueError:
                    pass
        self.lines.put(None)

    def _next(self, wanted, timeout: float, what: str) -> dict:
        """The next line ``wanted`` accepts (others, such as a late answer to an earlier round
        that timed out, are dropped) within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                msg = self.lines.get(timeout=max(left, 0))
            except queue.Empty:
                raise ProbeTimeout(f"no answer for {what} within {timeout:.1f} s") from None
            if msg is None:
                self.lines.put(None)          # stays at EOF for later calls
                raise ProbeError(f"the Java probe exited (code {self.proc.poll()}) during {what}:\n"
                                 f"{self.stderr_tail()}")
            if wanted(msg):
                return msg

    def round(self) -> float:
        """Send one message with a unique body and read it back; the seconds taken."""
        if self.proc is None:
            raise ProbeError("the Java probe is not running")
        self.seq += 1
        seq, body = self.seq, _unique_body(f"java-{self.seq}")
        t0 = time.monotonic()
        try:
            self.proc.stdin.write(f"{seq} {body}\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as e:
            raise ProbeError(f"the Java probe is gone: {e}\n{self.stderr_tail()}") from e
        msg = self._next(lambda m: m.get("seq") == seq, self.timeout, f"round {seq}")
        seconds = time.monotonic() - t0
        if "error" in msg:
            raise ProbeError(f"round {seq}: {msg['error']}", msg.get("code"))
        if msg.get("body") != body or msg.get("msgId") != msg.get("sentMsgId"):
            raise ProbeError(f"round {seq} read back {msg.get('body')!r} ({msg.get('msgId')}), "
                             f"sent {body!r} ({msg.get('sentMsgId')})")
        self.last = dict(msg, sent=body, seconds=seconds)
        self.rounds.append(seconds)
        return seconds

    def stderr_tail(self, lines: int = 30) -> str:
        """The end of the JVM's stderr."""
        path = self.work / "stderr.log" if self.work else None
        if path is None or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        """End of stdin: the JVM shuts both clients down and exits (killed after 15 s)."""
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.reader is not None:
                self.reader.join(timeout=5)
            self.proc.stdout.close()
            self.proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None


class GrpcClientProbe:
    """The official Python 5.x client: a ``Producer`` and a ``SimpleConsumer`` (group
    ``group``) on ``topic`` at the gRPC ``endpoint`` (``"host:port"``), signing with the keys
    when given. Starting asks for the topic's route (so a refusal, such as a wrong key, is
    the client's ``UnauthorizedException``), runs one warm-up round and raises
    :class:`ProbeError` (the client's exception as its ``__cause__``) if either failed. ``rounds`` and ``last`` as for
    :class:`JavaRemotingProbe` (``last``: ``sent``, ``body``, ``message_id``, ``send_s``,
    ``receive_s``, ``skipped``, ``seconds``)."""

    def __init__(self, endpoint: str, topic: str = "GrpcProbeTopic", group: str = "grpc-probe-group",
                 access_key: str = "", secret_key: str = "", *, timeout: float = ROUND_TIMEOUT,
                 await_duration: int = 2) -> None:
        self.endpoint, self.topic, self.group = endpoint, topic, group
        self.keys = (access_key or "", secret_key or "")
        self.timeout, self.await_duration = timeout, await_duration
        self.producer = self.consumer = None
        self.seq = 0
        self.rounds: list[float] = []
        self.last: dict = {}

    def __enter__(self) -> "GrpcClientProbe":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "GrpcClientProbe":
        """Start the producer and the consumer; return once a warm-up round completed."""
        from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
        cfg = ClientConfiguration(self.endpoint, Credentials(*self.keys), request_timeout=3)
        try:
            self.producer = Producer(cfg, (self.topic,))
            self.producer.startup()
            self._check_route(cfg)
            self.consumer = SimpleConsumer(cfg, self.group, {self.topic: FilterExpression("*")},
                                           self.await_duration)
            self.consumer.startup()
            self.round()
        except BaseException:
            self.close()
            raise
        self.rounds.clear()
        return self

    def _check_route(self, cfg) -> None:
        """The client's route query for the topic, answered through the client's own result
        checker: ``startup`` only logs a refusal (a wrong key), then a send says no more than
        "failed to fetch topic route". A topic not found yet is fine (the send creates it)."""
        from rocketmq.grpc_protocol import QueryRouteRequest
        from rocketmq.v5.exception import NotFoundException
        from rocketmq.v5.util.messaging_result_checker import MessagingResultChecker
        req = QueryRouteRequest()
        req.topic.name = self.topic
        req.endpoints.CopyFrom(cfg.rpc_endpoints.endpoints)
        future = self.producer.rpc_client.query_topic_route_async(cfg.rpc_endpoints, req,
                                                                   metadata=self.producer.sign(), timeout=3)
        try:
            MessagingResultChecker.check(future.result(timeout=self.timeout).status)
        except NotFoundException:
            pass
        except concurrent.futures.TimeoutError:
            raise ProbeTimeout(f"no route answer within {self.timeout:.1f} s") from None
        except Exception as e:
            raise ProbeError(f"route of {self.topic}: {type(e).__name__}: {e}", _code(e)) from e

    def _wait(self, future: concurrent.futures.Future, deadline: float, what: str, seq: int):
        try:
            return future.result(timeout=max(deadline - time.monotonic(), 0))
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ProbeTimeout(f"round {seq}: no {what} within {self.timeout:.1f} s") from None

    def round(self) -> float:
        """Send one message with a unique body, receive it and ack it; the seconds taken."""
        from rocketmq import Message
        self.seq += 1
        seq, body = self.seq, _unique_body(f"grpc-{self.seq}").encode()
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        m = Message()
        m.topic, m.body = self.topic, body
        try:
            receipt = self._wait(self.producer.send_async(m), deadline, "send receipt", seq)
            t1 = time.monotonic()
            found, skipped = None, 0
            while found is None:
                if time.monotonic() >= deadline:
                    raise ProbeTimeout(f"round {seq}: {body!r} not received within {self.timeout:.1f} s")
                for got in self._wait(self.consumer.receive_async(16, 30), deadline, "receive", seq):
                    # ack_async of rocketmq-python-client 5.1.2 returns None (no future to
                    # wait on): the synchronous ack, bounded by the request timeout (3 s)
                    self.consumer.ack(got)
                    if got.body == body:
                        found = got
                    else:
                        skipped += 1           # another probe's or an earlier round's
        except ProbeError:
            raise
        except Exception as e:          # the client's own exception, kept as the cause
            raise ProbeError(f"round {seq}: {type(e).__name__}: {e}", _code(e)) from e
        seconds = time.monotonic() - t0
        if found.message_id != receipt.message_id:
            raise ProbeError(f"round {seq}: {body!r} came back as {found.message_id}, "
                             f"sent as {receipt.message_id}")
        self.last = {"sent": body, "body": found.body, "message_id": found.message_id,
                     "sent_id": receipt.message_id, "send_s": t1 - t0, "receive_s": seconds - (t1 - t0),
                     "skipped": skipped, "seconds": seconds}
        self.rounds.append(seconds)
        return seconds

    def close(self) -> None:
        """Shut the consumer and the producer down."""
        for client in (self.consumer, self.producer):
            if client is not None:
                try:
                    client.shutdown()
                except Exception:  # noqa: BLE001 - a client that never started refuses shutdown
                    pass
        self.consumer = self.producer = None
