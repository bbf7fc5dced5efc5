"""What a bind exposes: the warnings ``pymq serve`` gives when it listens beyond loopback.

Bound to a loopback address, only local processes reach the server. Bound to anything else
(``0.0.0.0``, a LAN or public address, a host name that is not the machine's loopback),
anyone who reaches the ports can send, consume and administer topics and groups unless
access keys are set, the RocketMQ 4 remoting ports are plaintext without
``--remoting-tls``, gRPC is plaintext without ``--tls-cert``, and the metrics page has no
authentication; a master's HA port (replication) hands its whole commit log to anyone who
connects, with neither authentication nor TLS (RocketMQ's HA protocol has neither). Each such
fact is a warning ``{"kind", "message"}``: printed to stderr at
start, kept in ``Broker.server_warnings`` (``stats()["server"]["warnings"]``) and exported
as ``pymq_server_warning{kind=...}``.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Optional

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})

OPEN_ACCESS = "open-access"
PLAINTEXT = "plaintext"
PUBLIC_METRICS = "public-metrics"
OPEN_REPLICATION = "open-replication"


def is_loopback(host: str) -> bool:
    """True when ``host`` (an address or a name) only reaches this machine: a loopback
    address, or a name all of whose addresses are loopback ones."""
    host = host.strip().strip("[]")
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a.split("%", 1)[0]).is_loopback for a in addresses)


def bind_warnings(host: str, *, access_key: Optional[str], grpc_port: Optional[int], grpc_tls: bool,
                  remoting_ports: dict, metrics_host: Optional[str], remoting_tls: bool = False,
                  ha_port: Optional[int] = None) -> list[dict]:
    """The warnings of serving on ``host``: gRPC on ``grpc_port`` (None: off), remoting on
    ``remoting_ports`` (``{"namesrv": port, "broker": port}``, the enabled ones), metrics on
    ``metrics_host`` (None: off), a master's HA port ``ha_port`` (None: none; 0: picked)."""
    out = []
    if not is_loopback(host):
        if not access_key:
            out.append({"kind": OPEN_ACCESS, "message": (
                f"listening on {host}, beyond loopback, without access keys: anyone who reaches these ports "
                f"can send, consume, and create or delete topics and groups. Set --access-key/--secret-key "
                f"(or PYMQ_ACCESS_KEY/PYMQ_SECRET_KEY), or bind to 127.0.0.1")})
        plain = [] if remoting_tls else [f"remoting {name} port {port} (no --remoting-tls)"
                                         for name, port in sorted(remoting_ports.items())]
        if grpc_port is not None and not grpc_tls:
            plain.insert(0, f"gRPC port {grpc_port} (no --tls-cert)")
        if plain:
            out.append({"kind": PLAINTEXT, "message": (
                f"plaintext on {host}: {', '.join(plain)}; messages and credentials' signatures cross the "
                f"network readable")})
    if ha_port is not None and not is_loopback(host):
        out.append({"kind": OPEN_REPLICATION, "message": (
            f"HA port {ha_port or '(picked)'} on {host}: it sends the whole commit log to anyone who connects, "
            f"without authentication or TLS (RocketMQ's HA protocol has neither); let only the slaves reach it "
            f"(a firewall), or --ha-port off")})
    if metrics_host is not None and not is_loopback(metrics_host):
        out.append({"kind": PUBLIC_METRICS, "message": (
            f"metrics served on {metrics_host} without authentication (topic and group names, rates, "
            f"lag); --metrics-host 127.0.0.1 keeps them local")})
    return out
