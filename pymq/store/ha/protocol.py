"""The bytes of RocketMQ 4.x's master/slave replication (HAService / HAConnection / HAClient).

One TCP connection per slave, opened by the slave to the master's HA port (RocketMQ:
``haListenPort``, the broker's listen port + 1). Each side writes one kind of message::

    slave -> master: its max commit-log offset (on connect, after each read burst that
                     made records visible, and every ha_send_heartbeat_interval when
                     idle)

        0                               8
        +-------------------------------+
        |  max physical offset  int64   |     big-endian
        +-------------------------------+

    master -> slave: commit-log bytes from the slave's offset on, in frames

        0               8       12                          12 + bodySize
        +---------------+-------+---------------------------+
        | phyOffset i64 |size i32|  commit-log bytes        |  big-endian
        +---------------+-------+---------------------------+

        bodySize 0 is a heartbeat (sent when the master had nothing to send for
        ha_send_heartbeat_interval); its phyOffset is where the next bytes will start.

Rules (RocketMQ 4.9.7's, as pymq keeps them on both sides):

* the master reads the slave's reports as a stream of 8-byte values and takes the last
  whole one; the first one is where the transfer starts: 0 means "the beginning of the
  master's last commit-log segment" (a new slave does not copy the whole history), any
  other value is taken as is; a later report past the master's end closes the connection;
* a frame never crosses the end of a commit-log segment (a segment ends with its
  END_FILE blank, and the next frame starts the next segment);
* the slave appends the bytes byte for byte at ``phyOffset``; a frame whose offset is
  not where the slave's received bytes end closes the connection (the slave then
  reconnects and reports again). An empty slave takes the first frame's offset.

Nothing else is on the wire: no handshake, no version, no checksum of its own (the
records carry their CRCs).
"""

from __future__ import annotations

import struct

#: the slave's report: its max physical offset
OFFSET = struct.Struct(">q")
#: a master frame's header: physical offset of the first byte, body size
FRAME_HEADER = struct.Struct(">qi")
FRAME_HEADER_SIZE = FRAME_HEADER.size          # 12
REPORT_SIZE = OFFSET.size                      # 8


def encode_report(offset: int) -> bytes:
    """The slave's 8-byte report of ``offset``."""
    return OFFSET.pack(offset)


def encode_frame_header(phy_offset: int, body_size: int) -> bytes:
    """A frame's 12-byte header (``body_size`` 0: a heartbeat)."""
    return FRAME_HEADER.pack(phy_offset, body_size)


def last_report(buffered: bytes) -> tuple[int | None, bytes]:
    """From bytes a master has read off a slave: the last whole 8-byte report (None when
    there is none yet) and the bytes left over (fewer than 8) for the next read."""
    whole = len(buffered) - len(buffered) % REPORT_SIZE
    if whole == 0:
        return None, buffered
    return OFFSET.unpack_from(buffered, whole - REPORT_SIZE)[0], buffered[whole:]


def start_offset(requested: int, master_max_offset: int, file_size: int) -> int:
    """Where a master starts sending to a slave that first reported ``requested``: the
    start of its last segment for 0, else ``requested``."""
    if requested == 0:
        return max(0, master_max_offset - master_max_offset % file_size)
    return requested


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (an IPv6 host in brackets) as ``(host, port)``; ValueError otherwise."""
    if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"an HA address is host:port, not {address!r}")
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"an HA address is host:port, not {address!r}")
    return host, int(port)
