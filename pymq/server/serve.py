"""``pymq serve``: open a store as a :class:`pymq.Broker` and serve it to RocketMQ clients
until SIGTERM or SIGINT: RocketMQ 5's gRPC protocol (port 8081, the proxy's) and RocketMQ
4's remoting protocol, as a name server (9876) and a broker (10911). Any of the three can be
turned off (``--port off``, ``--namesrv-port off``, ``--broker-port off``).

Prints one line per listener (flushed, so scripts can wait for them), then ``pymq serve:
ready``; with ``--status-interval S`` one status line every S seconds. On SIGTERM it stops
accepting calls, lets in-flight ones finish, then shuts the broker down (store flushed,
checkpoint written) and exits 0. Credentials may come from ``--access-key``/``--secret-key``
or the environment (``PYMQ_ACCESS_KEY``/``PYMQ_SECRET_KEY``), which keeps the secret out of
the process list. The loop is uvloop's when uvloop is installed.

Bound beyond loopback, it warns (stderr, ``stats()["server"]["warnings"]``, the metrics)
about what that exposes: no access keys, plaintext listeners, a public metrics page
(:mod:`.exposure`). Idle connections are closed after ``--idle-timeout`` (120 s), frames
and HTTP/2 prefaces that stall after ``--frame-timeout`` (10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from .remoting.admission import (MAX_CONNECTION_BYTES, MAX_HEADER_BYTES, MAX_HEADER_FIELDS, MAX_INFLIGHT_BYTES,
                                 MAX_UNAUTHENTICATED_BYTES)


def _port(text: str):
    """A port number, or None for ``off``."""
    if text.lower() in ("off", "none", "-"):
        return None
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number or 'off'") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} out of range")
    return port


def _check_ports(args: argparse.Namespace) -> None:
    """Raise ``PymqError`` naming the port when one the listeners need is taken (or given
    twice), before anything binds for good or the store opens: a busy port leaves no
    "listening" line and no store directory behind. Port 0 and ``off`` are not probed."""
    import errno
    import socket

    from pymq.errors import PymqError

    metrics_host = getattr(args, "metrics_host", args.host)
    wanted = [("gRPC (--port)", args.host, args.port), ("name server (--namesrv-port)", args.host, args.namesrv_port),
              ("broker (--broker-port)", args.host, args.broker_port),
              ("VIP channel (--vip-port)", args.host, args.vip_port),
              ("metrics (--metrics-port)", metrics_host, getattr(args, "metrics_port", None))]
    seen: dict = {}
    for what, host, port in wanted:
        if not port:
            continue
        if (host, port) in seen:
            raise PymqError(f"serve: port {port} is given to both {seen[host, port]} and {what}")
        seen[host, port] = what
        try:
            socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET).close()
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise PymqError(f"serve: port {port} on {host} is in use: {what} cannot listen there") from None
            raise PymqError(f"serve: cannot listen on {host} port {port} for {what}: {e.strerror or e}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pymq serve``."""
    parser.add_argument("--store", default=argparse.SUPPRESS, metavar="DIR", help="store root directory")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8081,
                        help="gRPC port (default 8081, the proxy's; 0 picks one; off: no gRPC)")
    parser.add_argument("--namesrv-port", type=_port, default=9876,
                        help="4.x name server port (default 9876; 0 picks one; off: none)")
    parser.add_argument("--broker-port", type=_port, default=10911,
                        help="4.x broker (remoting) port (default 10911; 0 picks one; off: none)")
    parser.add_argument("--vip-port", type=_port, default=-1, metavar="P",
                        help="second broker listener, RocketMQ's VIP channel (fastListenPort), where a RocketMQ "
                             "slave fetches its master's topics (default: the broker port - 2 when the broker "
                             "port is fixed, else off; 0 picks one; off: none)")
    parser.add_argument("--message-delay-level", default=None, metavar="LEVELS",
                        help="the delay levels, e.g. \"1s 5s 10s 30s 1m ...\" (RocketMQ's messageDelayLevel; "
                             "retries are delayed by level 3 + attempts)")
    parser.add_argument("--advertised-host", default=None, metavar="HOST",
                        help="address that routes give clients (default: the bound one)")
    parser.add_argument("--status-interval", type=float, default=0, metavar="S",
                        help="print a status line every S seconds (default: never)")
    parser.add_argument("--access-key", default=os.environ.get("PYMQ_ACCESS_KEY"),
                        help="require calls signed with this access key (env PYMQ_ACCESS_KEY)")
    parser.add_argument("--secret-key", default=os.environ.get("PYMQ_SECRET_KEY"),
                        help="the access key's secret (env PYMQ_SECRET_KEY)")
    parser.add_argument("--tls-cert", default=None, metavar="PEM", help="serve TLS with this certificate chain")
    parser.add_argument("--tls-key", default=None, metavar="PEM", help="private key of --tls-cert")
    parser.add_argument("--remoting-tls", action="store_true",
                        help="the remoting ports speak TLS only, with --tls-cert (RocketMQ 4 clients: tls.enable=true)")
    # -- gRPC limits against hostile clients (docs/server.md, Limits) --
    parser.add_argument("--grpc-max-inbound-bytes", type=int, default=None, metavar="N",
                        help="largest gRPC message received; larger ones get RESOURCE_EXHAUSTED before they are "
                             "buffered (default 5 MiB: the 4 MiB body limit + 1 MiB of properties and batch framing; "
                             "RocketMQ's proxy allows 130 MiB)")
    parser.add_argument("--grpc-max-concurrent-calls", type=int, default=4096, metavar="N",
                        help="gRPC calls in progress at once, long polls and Telemetry streams included; beyond, "
                             "RESOURCE_EXHAUSTED (default 4096; 0: no cap)")
    parser.add_argument("--max-clock-skew", type=float, default=900.0, metavar="S",
                        help="with access keys, a call's signed x-mq-date-time must be within S seconds of the "
                             "server's clock, else UNAUTHORIZED (default 900; 0: not checked)")
    parser.add_argument("--clock-zones", choices=("server", "any"), default="server",
                        help="read a signed date-time written without a zone (the Java, Python, Go and C# clients "
                             "write local time) as UTC or the server's zone (server), or in any zone (any: clients "
                             "elsewhere pass; a captured header then replays for about a day)")
    parser.add_argument("--grpc-bdp-probe", action="store_true",
                        help="let HTTP/2 windows grow on bandwidth-delay estimates (gRPC's default; faster large "
                             "messages on long links, but unread streams may each buffer megabytes)")
    parser.add_argument("--no-auto-create-topic", action="store_true",
                        help="refuse sends to unknown topics (TOPIC_NOT_FOUND)")
    parser.add_argument("--max-topics", type=int, default=4096, metavar="N",
                        help="sends create no more topics once N exist (system topics aside); further sends to "
                             "unknown topics get TOPIC_NOT_FOUND (default 4096, 0: no limit)")
    parser.add_argument("--max-queues-per-topic", type=int, default=1024, metavar="N",
                        help="a topic's read and write queue numbers are at most N (updateTopic beyond is "
                             "refused; default 1024)")
    parser.add_argument("--no-auto-create-group", action="store_true",
                        help="refuse unknown consumer groups (CONSUMER_GROUP_NOT_FOUND)")
    parser.add_argument("--flush", choices=("async", "sync"), default="async",
                        help="acknowledge sends after the page-cache write (async) or after fsync (sync)")
    parser.add_argument("--transaction-timeout", type=int, default=6_000, metavar="MS",
                        help="a half message this old is checked with its producer (default 6000)")
    parser.add_argument("--transaction-check-interval", type=int, default=60_000, metavar="MS",
                        help="how often open half messages are looked at (default 60000)")
    parser.add_argument("--renew-slice", type=int, default=60_000, metavar="MS",
                        help="push consumers' messages are hidden this long, renewed while held (default 60000)")
    parser.add_argument("--grace", type=float, default=10.0, metavar="S",
                        help="on SIGTERM, how long in-flight calls may finish (default 10)")
    # -- hostile and dead peers (docs/server.md, docs/remoting.md) --
    parser.add_argument("--idle-timeout", type=float, default=120.0, metavar="S",
                        help="close a connection idle this long: remoting, no read or write; gRPC, no call "
                             "(default 120, RocketMQ's serverChannelMaxIdleTimeSeconds; 0: never)")
    parser.add_argument("--frame-timeout", type=float, default=10.0, metavar="S",
                        help="a remoting frame begun must be complete, and a new gRPC connection must have "
                             "spoken HTTP/2, within S seconds (default 10; 0: no limit)")
    for flag, default, what in (
            ("--max-inflight-bytes", MAX_INFLIGHT_BYTES, "remoting frames being read or served, all connections"),
            ("--max-unauthenticated-bytes", MAX_UNAUTHENTICATED_BYTES,
             "the same, connections that have not yet sent a signed request (with access keys)"),
            ("--max-connection-bytes", MAX_CONNECTION_BYTES, "the same, one connection"),
            ("--max-header-bytes", MAX_HEADER_BYTES, "a remoting frame's header; a larger one closes the connection")):
        parser.add_argument(flag, type=int, default=default, metavar="BYTES", help=f"{what} (default {default:,})")
    parser.add_argument("--max-header-fields", type=int, default=MAX_HEADER_FIELDS, metavar="N",
                        help=f"ext fields of a remoting header; more close the connection (default {MAX_HEADER_FIELDS})")
    parser.add_argument("--send-queue-capacity", type=int, default=10_000, metavar="N",
                        help="with --flush sync, remoting sends queued for the disk beyond N are answered "
                             "SYSTEM_BUSY at once (RocketMQ's sendThreadPoolQueueCapacity; default 10,000; 0: no limit)")
    parser.add_argument("--send-queue-wait-ms", type=int, default=200, metavar="MS",
                        help="with --flush sync, a remoting send that waited longer for a worker is answered "
                             "SYSTEM_BUSY, not stored (RocketMQ's waitTimeMillsInSendQueue; default 200; 0: no limit)")
    # -- cluster membership: name-server registration (docs/remoting.md, Name server) --
    parser.add_argument("--namesrv-addr", default=None, metavar="ADDRS",
                        help="register the broker with these name servers, \"host:port;host:port\" (RocketMQ's "
                             "namesrvAddr): at start, every 30 s and on topic changes; unregister at shutdown")
    parser.add_argument("--broker-name", default=None, metavar="NAME", help="brokerName (default broker-a)")
    parser.add_argument("--broker-id", type=int, default=None, metavar="ID",
                        help="brokerId: 0 the master (default), 1.. a slave of the master of the same --broker-name")
    parser.add_argument("--cluster-name", default=None, metavar="NAME",
                        help="brokerClusterName (default DefaultCluster)")
    # -- metrics (docs/operations.md) --
    parser.add_argument("--metrics-port", type=int, default=None, metavar="P",
                        help="serve Prometheus metrics at http://METRICS_HOST:P/metrics (0 picks a port; "
                             "default: no metrics)")
    parser.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                        help="address of the metrics page, which has no authentication (default 127.0.0.1)")
    # -- replication: role, master, HA port, broker.conf (docs/server.md, Master and slave) --
    from .role_options import add_role_arguments
    add_role_arguments(parser, _port)


async def _serve(broker, grpc_server, remoting_server, sockets: dict, interval: float) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    servers = [x for x in (remoting_server, grpc_server) if x is not None]
    try:
        if remoting_server is not None:
            ports = await remoting_server.start(sockets)
            host = remoting_server.config.host
            if "namesrv" in ports:
                print(f"pymq serve: name server listening on {host}:{ports['namesrv']} (RocketMQ 4 remoting)",
                      flush=True)
            if "broker" in ports:
                print(f"pymq serve: broker listening on {host}:{ports['broker']} (RocketMQ 4 remoting, "
                      f"advertised as {remoting_server.broker_address})", flush=True)
            if "vip" in ports:
                print(f"pymq serve: broker's VIP channel listening on {host}:{ports['vip']} (fastListenPort)",
                      flush=True)
        if grpc_server is not None:
            port = await grpc_server.start()
            cfg = grpc_server.config
            scheme = "grpcs" if cfg.tls_cert else "grpc"
            print(f"pymq serve: listening on {cfg.host}:{port} ({scheme}, apache.rocketmq.v2.MessagingService), "
                  f"store {broker.store_path}", flush=True)
        print("pymq serve: ready", flush=True)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), interval if interval > 0 else None)
            except asyncio.TimeoutError:
                print("pymq serve: " + " | ".join(x.status_line() for x in servers), flush=True)
    finally:
        print("pymq serve: stopping", flush=True)
        for x in servers:
            await x.stop()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(args: argparse.Namespace) -> int:
    """Body of ``pymq serve``; the exit code."""
    import logging

    from pymq.broker import Broker, BrokerConfig
    from pymq.config import StoreConfig
    from pymq.store_sizes import config_for_store
    from pymq.errors import PymqError

    from .addresses import route_host
    from .exposure import bind_warnings
    from .grpc.server_config import ServerConfig
    from .remoting import RemotingConfig, RemotingServer, bind_listeners
    from .role_options import apply_role, master_broker_address, read_broker_config

    logging.basicConfig(level=os.environ.get("PYMQ_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    read_broker_config(args)
    if args.idle_timeout < 0 or args.frame_timeout < 0:
        raise PymqError("serve: --idle-timeout and --frame-timeout must be >= 0")
    try:
        cfg = ServerConfig(host=args.host, port=args.port or 0, advertised_host=args.advertised_host,
                           access_key=args.access_key or None, secret_key=args.secret_key or None,
                           tls_cert=args.tls_cert, tls_key=args.tls_key, grace_s=args.grace,
                           auto_renew_invisible_ms=args.renew_slice,
                           idle_timeout_ms=round(args.idle_timeout * 1000),
                           handshake_timeout_ms=round(args.frame_timeout * 1000),
                           max_inbound_bytes=args.grpc_max_inbound_bytes,
                           max_concurrent_calls=args.grpc_max_concurrent_calls, max_clock_skew_s=args.max_clock_skew,
                           clock_zones=args.clock_zones,
                           http2_bdp_probe=args.grpc_bdp_probe)
    except PymqError as e:
        raise PymqError(f"serve: {e}") from None
    store_config = config_for_store(args.store) if os.path.isdir(args.store) else StoreConfig()
    store_config.flush_disk_type = "SYNC_FLUSH" if args.flush == "sync" else "ASYNC_FLUSH"
    if args.max_topics < 0:
        raise PymqError("serve: --max-topics must be >= 0")
    broker_config = BrokerConfig(auto_create_topic_enable=not args.no_auto_create_topic, max_topics=args.max_topics,
                                 max_queues_per_topic=args.max_queues_per_topic,
                                 auto_create_subscription_group=not args.no_auto_create_group,
                                 transaction_timeout=args.transaction_timeout,
                                 transaction_check_interval=args.transaction_check_interval)
    broker_config.slave_sync_interval_s = args.slave_sync_interval
    broker_config.validate()
    for field, dest in (("broker_name", "broker_name"), ("cluster_name", "cluster_name"),
                        ("slave_read_enable", "slave_read_enable")):
        if getattr(args, dest, None) is not None:        # broker.conf's (or an option's)
            setattr(broker_config, field, getattr(args, dest))
    from .broker_conf import BROKER_CONFIG_FIELDS
    for field in BROKER_CONFIG_FIELDS:                   # broker.conf's, no option of their own
        if getattr(args, field, None) is not None:
            setattr(broker_config, field, getattr(args, field))
    for field in ("delete_when", "file_reserved_time"):
        if getattr(args, field, None) is not None:
            setattr(store_config, field, getattr(args, field))
    if args.message_delay_level:
        store_config.message_delay_level = args.message_delay_level
    # -- cluster membership (name-server registration) --
    from .remoting.broker_registration import parse_namesrv_addr
    for flag, field in (("namesrv_addr", "namesrv_addr"), ("broker_name", "broker_name"),
                        ("broker_id", "broker_id"), ("cluster_name", "cluster_name")):
        if getattr(args, flag, None) is not None:
            setattr(broker_config, field, getattr(args, flag))
    try:
        parse_namesrv_addr(broker_config.namesrv_addr)
        broker_config.validate()
    except (ValueError, PymqError) as e:
        raise PymqError(f"serve: {e}") from None
    if broker_config.namesrv_addr and args.broker_port is None:
        raise PymqError("serve: --namesrv-addr registers the broker port: it cannot be off")
    # -- end cluster membership --
    if args.port is None and args.namesrv_port is None and args.broker_port is None:
        raise PymqError("serve: every listener is off (--port, --namesrv-port, --broker-port)")
    if args.vip_port == -1:             # default: RocketMQ's layout, fastListenPort = listenPort - 2
        args.vip_port = args.broker_port - 2 if args.broker_port and args.broker_port > 2 else None
    remoting_cfg = RemotingConfig(host=args.host, namesrv_port=args.namesrv_port, broker_port=args.broker_port,
                                  vip_port=args.vip_port,
                                  advertised_host=args.advertised_host, access_key=args.access_key or None,
                                  secret_key=args.secret_key or None, idle_timeout_s=args.idle_timeout,
                                  tls_cert=args.tls_cert if args.remoting_tls else None,
                                  tls_key=args.tls_key if args.remoting_tls else None,
                                  frame_timeout_s=args.frame_timeout, max_inflight_bytes=args.max_inflight_bytes,
                                  max_unauthenticated_bytes=args.max_unauthenticated_bytes,
                                  max_connection_bytes=args.max_connection_bytes,
                                  max_header_bytes=args.max_header_bytes, max_header_fields=args.max_header_fields,
                                  send_thread_pool_queue_capacity=args.send_queue_capacity,
                                  wait_time_ms_in_send_queue=args.send_queue_wait_ms)
    remoting = args.namesrv_port is not None or args.broker_port is not None
    _check_ports(args)
    try:
        sockets = bind_listeners(remoting_cfg) if remoting else {}
    except OSError as e:
        raise PymqError(f"serve: cannot listen on {args.host}: {e}") from None
    if "broker" in sockets:
        # records carry the broker's address as their store host, as a RocketMQ broker's do
        store_config.store_host = f"{route_host(args.host, args.advertised_host)}:{sockets['broker'].getsockname()[1]}"
    apply_role(args, store_config, sockets["broker"].getsockname()[1] if "broker" in sockets else None)
    metrics_host = getattr(args, "metrics_host", "127.0.0.1")
    if args.remoting_tls and not args.tls_cert:
        raise PymqError("serve: --remoting-tls needs --tls-cert and --tls-key")
    warnings = bind_warnings(args.host, access_key=args.access_key, grpc_port=args.port, grpc_tls=bool(args.tls_cert),
                             remoting_tls=args.remoting_tls,
                             remoting_ports={k: s.getsockname()[1] for k, s in sockets.items()},
                             metrics_host=metrics_host if getattr(args, "metrics_port", None) is not None else None,
                             ha_port=store_config.ha_listen_port if store_config.broker_role != "SLAVE" else None)
    for w in warnings:
        print(f"pymq serve: WARNING: {w['message']}", file=sys.stderr, flush=True)
    broker = Broker(args.store, store_config, broker_config)
    broker.server_warnings.extend(warnings)
    loop = _new_loop()
    metrics = None
    slave_sync = None
    try:
        broker.start()
        grpc_server = None
        if args.port is not None:
            from .grpc import GrpcServer          # grpcio: only when gRPC is served
            grpc_server = GrpcServer(broker, cfg)
        remoting_server = RemotingServer(broker, remoting_cfg) if remoting else None
        ha_port = getattr(broker.ha, "port", None) if not broker.is_slave else None
        if ha_port:
            print(f"pymq serve: HA listening on {store_config.ha_listen_host}:{ha_port} "
                  f"({broker_config.broker_name}'s commit log to its slaves, {store_config.broker_role})", flush=True)
        if broker.is_slave:
            from .remoting.slave_sync import SlaveSynchronize
            slave_sync = SlaveSynchronize(broker, master_broker_address(args),
                                          own_address=remoting_server.broker_address if remoting_server else None)
            slave_sync.start()
            registration = remoting_server.registration if remoting_server else None
            if registration is not None:        # the name servers' answers name the master
                def master_changed(master_addr, ha_addr, store_side=registration.update_store_master):
                    store_side(master_addr, ha_addr)
                    slave_sync.set_master_address(master_addr)
                registration.on_master_changed = master_changed
            print(f"pymq serve: slave of {args.master or '(the name server names it)'}, syncing topics, groups and "
                  f"offsets from {slave_sync.master_address or '(not known yet)'} every "
                  f"{broker_config.slave_sync_interval_s:g} s", flush=True)
        # -- metrics: Prometheus text from store.stats() and the gRPC latencies (docs/operations.md) --
        if getattr(args, "metrics_port", None) is not None:
            from .metrics import start_metrics_server
            metrics = start_metrics_server(broker, metrics_host, args.metrics_port, [grpc_server, remoting_server])
            print(f"pymq serve: metrics on http://{metrics_host}:{metrics.port}/metrics", flush=True)
        # -- end metrics --
        loop.run_until_complete(_serve(broker, grpc_server, remoting_server, sockets, args.status_interval))
    finally:
        if slave_sync is not None:
            slave_sync.shutdown()
        if metrics is not None:
            metrics.stop()
        for sock in sockets.values():
            sock.close()
        loop.close()
        broker.shutdown()
    print("pymq serve: stopped (store flushed, checkpoint written)", flush=True)
    sys.stdout.flush()
    return 0
