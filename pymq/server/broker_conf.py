"""RocketMQ's ``broker.conf`` for ``pymq serve --broker-config FILE``.

The file is a Java properties file (``key=value``, ``key: value`` or ``key value``; ``#``
and ``!`` comments; a trailing backslash continues a line; ``\\t``, ``\\n``, ``\\uXXXX``
escapes), read as ``BrokerStartup`` reads it into ``BrokerConfig`` /
``MessageStoreConfig`` / ``NettyServerConfig``. Each key pymq knows becomes the ``pymq
serve`` option of the same meaning (:data:`KEYS`); an option given on the command line
wins over the file (an option left at its default takes the file's value). Every other
key is warned about once, by name, and otherwise ignored: nothing in the file is taken to
mean something it does not say.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from pymq.errors import PymqError


def _bool(text: str) -> bool:
    # RocketMQ's MixAll.properties2Object: Boolean.parseBoolean (only "true" is true)
    return text.strip().lower() == "true"


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def _role(text: str) -> str:
    role = text.strip().upper()
    if role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
        raise ValueError(f"{text!r} is not ASYNC_MASTER, SYNC_MASTER or SLAVE")
    return role.lower()


def _flush(text: str) -> str:
    kind = text.strip().upper()
    if kind not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        raise ValueError(f"{text!r} is not ASYNC_FLUSH or SYNC_FLUSH")
    return "sync" if kind == "SYNC_FLUSH" else "async"


def _text(text: str) -> str:
    return text.strip()


def _not(text: str) -> bool:
    return not _bool(text)


#: broker.conf key -> (``pymq serve`` option dest, conversion). Keys for options that
#: another part of ``pymq serve`` defines (name server registration: ``namesrvAddr``,
#: ``brokerId``) set the same dest; the option's own default stands when it has none.
KEYS: dict[str, tuple[str, Callable]] = {
    "brokerRole": ("broker_role", _role),
    "haMasterAddress": ("master", _text),
    "haListenPort": ("ha_port", _int),
    "listenPort": ("broker_port", _int),
    "brokerName": ("broker_name", _text),
    "brokerClusterName": ("cluster_name", _text),
    "brokerId": ("broker_id", _int),
    "namesrvAddr": ("namesrv_addr", _text),
    "brokerIP1": ("advertised_host", _text),
    "storePathRootDir": ("store", _text),
    "flushDiskType": ("flush", _flush),
    "autoCreateTopicEnable": ("no_auto_create_topic", _not),
    "autoCreateSubscriptionGroup": ("no_auto_create_group", _not),
    "messageDelayLevel": ("message_delay_level", _text),
    "transactionTimeOut": ("transaction_timeout", _int),
    "transactionCheckInterval": ("transaction_check_interval", _int),
    "slaveReadEnable": ("slave_read_enable", _bool),
    "deleteWhen": ("delete_when", _text),
    "fileReservedTime": ("file_reserved_time", _int),
    # lite topics (5.5): BrokerConfig fields of these names (pymq.broker.broker_config)
    "maxLiteSubscriptionCount": ("max_lite_subscription_count", _int),
    "liteTtlCheckInterval": ("lite_ttl_check_interval", _int),
    "minLiteTTl": ("min_lite_ttl", _int),
    # pymq's own: the length of a "minute" of lite.topic.expiration, for tests
    "liteTopicExpirationUnitMs": ("lite_topic_expiration_unit_ms", _int),
}

#: the dests of :data:`KEYS` that are BrokerConfig fields of that name (no serve option)
BROKER_CONFIG_FIELDS = ("max_lite_subscription_count", "lite_ttl_check_interval", "min_lite_ttl",
                        "lite_topic_expiration_unit_ms")

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    def one(m: re.Match) -> str:
        c = m.group(1)
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return _ESCAPES.get(c, c)
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, text)


def _logical_lines(text: str):
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:          # an odd number of backslashes: the line goes on
            pending += line[:-1]
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def read_properties(text: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a Java properties text, in order (a later key wins)."""
    pairs = []
    for line in _logical_lines(text):
        m = re.match(r"((?:\\.|[^\s=:\\])*)\s*[=:]?\s*(.*)$", line, re.S)
        key, value = m.group(1), m.group(2)
        pairs.append((_unescape(key), _unescape(value)))
    return pairs


def parse_broker_conf(text: str) -> tuple[dict, list[str]]:
    """(``{option dest: value}``, [unknown keys]) of a broker.conf text. Raises
    :class:`PymqError` naming the key whose value cannot be read."""
    values: dict = {}
    unknown: list[str] = []
    for key, value in read_properties(text):
        known = KEYS.get(key)
        if known is None:
            if key not in unknown:
                unknown.append(key)
            continue
        dest, convert = known
        try:
            values[dest] = convert(value)
        except ValueError as e:
            raise PymqError(f"broker.conf: {key}={value!r}: {e}") from None
    return values, unknown


def apply_broker_conf(args, path: str, defaults: dict, warn: Optional[Callable[[str], None]] = None) -> dict:
    """Read ``path`` and set each option of ``args`` that is still at its default
    (``defaults``: dest -> default) to the file's value; an option the command line gave
    keeps its value. ``warn`` gets one line per unknown key. Returns what the file set."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise PymqError(f"serve: --broker-config {path}: {e.strerror or e}") from None
    values, unknown = parse_broker_conf(text)
    for key in unknown:
        if warn is not None:
            warn(f"{path}: {key} is not a setting pymq serve knows; ignored")
    taken = {}
    for dest, value in values.items():
        if dest in defaults and getattr(args, dest, None) != defaults[dest]:
            continue                     # the command line gave it: it wins
        setattr(args, dest, value)
        taken[dest] = value
    return taken
