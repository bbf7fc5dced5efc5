"""Access-key authentication: RocketMQ 5's request signature, bound to the server's clock.

A client with credentials sends, on every call, the header ``x-mq-date-time`` (its clock as
``yyyyMMdd'T'HHmmss'Z'``) and ``authorization``::

    MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is HMAC-SHA1 of the date-time text under the secret key, in hex. The
server recomputes it with the secret of the access key named; a call without it, with an
unknown key or a wrong signature is answered ``UNAUTHORIZED`` and reaches nothing.

**The date-time must be near the server's clock** (``max_clock_skew_s``, 900 s by default,
``pymq serve --max-clock-skew``; 0 turns the check off), so that a captured header cannot be
replayed beyond that window; a date-time that does not parse is refused too. RocketMQ 5
does not check it: its proxy (5.1, ``acl`` module: ``PlainAccessResource`` takes the
date-time as the signed content; 5.3, ``auth`` module: ``DefaultAuthenticationContextBuilder``
only refuses a missing one, ``DefaultAuthenticationHandler`` compares the signature) accepts
any date-time, of any age, whose signature matches. This check is pymq's.

What "the client's clock" means differs between the official clients: the Java
(``SimpleDateFormat`` with the default zone), Python (``datetime.now()``), Go and C#
clients write their *local* wall time followed by a literal ``Z``; the Node.js and C++
clients write UTC; the Rust client writes RFC 3339 with its offset. So the compact form is
accepted when it is within the window of the server's UTC time or of its local time (a
client in the server's time zone, or anywhere when both run in UTC); RFC 3339 is compared
with its own offset. A client in another time zone than the server's that writes local
time is refused, with its offset from the server's clock in the reason. For such
deployments ``clock_zones="any"`` (``pymq serve --clock-zones any``) reads the compact form
in whichever zone (UTC-12 to UTC+14, in 15-minute steps) puts it nearest the server's
clock: every client's local time passes, but since zones are a quarter hour apart so is
any date-time from 12 h 15 min behind to 14 h 15 min ahead of the server's UTC time, so a
captured header stays usable for about a day instead of 15 minutes.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import re
import time
from typing import Callable, Optional

ALGORITHM = "MQv2-HMAC-SHA1"
MAX_CLOCK_SKEW_S = 900          # 15 minutes, either way

_COMPACT = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z")
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def sign(secret_key: str, date_time: str) -> str:
    """The hex signature of ``date_time`` under ``secret_key``."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def parse_authorization(value: str) -> Optional[dict]:
    """The fields of an ``authorization`` header (``Credential``, ``SignedHeaders``,
    ``Signature``), or None when it is not an ``MQv2-HMAC-SHA1`` one."""
    algo, _, rest = value.strip().partition(" ")
    if algo != ALGORITHM:
        return None
    fields = {}
    for part in rest.split(","):
        k, eq, v = part.strip().partition("=")
        if eq:
            fields[k.strip()] = v.strip()
    return fields


def parse_date_time(text: str) -> Optional[tuple[float, bool]]:
    """``(seconds since the epoch, zone_known)`` of an ``x-mq-date-time`` value, or None
    when it is neither ``yyyyMMdd'T'HHmmss'Z'`` nor RFC 3339. The compact form is read as
    UTC and ``zone_known`` is False (clients write local time in it, see above)."""
    m = _COMPACT.fullmatch(text)
    try:
        if m is not None:
            fields = [int(x) for x in m.groups()]
            return _dt.datetime(*fields, tzinfo=_dt.timezone.utc).timestamp(), False
        m = _RFC3339.fullmatch(text)
        if m is not None:
            zone = m.group(3)
            zone = "+00:00" if zone in ("Z", "z") else zone
            fraction = (m.group(2) or "")[:7]           # fromisoformat takes up to microseconds
            moment = _dt.datetime.fromisoformat(m.group(1).replace("t", "T").replace(" ", "T") + fraction + zone)
            return moment.timestamp(), True
    except ValueError:          # month 13, hour 25...
        return None
    return None


ZONE_STEP_S = 900                           # time zones are offset from UTC in quarter hours
ZONES_S = (-12 * 3600, 14 * 3600)           # from UTC-12 to UTC+14


def clock_skew(text: str, now: float, parsed=False, any_zone: bool = False) -> Optional[float]:
    """Seconds from ``now`` to the date-time ``text`` (negative: in the past), the compact
    form read as UTC or as the server's local time, whichever is nearer (``any_zone``: or in
    any zone); None when it does not parse. ``parsed``: ``parse_date_time(text)`` when known."""
    if parsed is False:
        parsed = parse_date_time(text)
    if parsed is None:
        return None
    moment, zone_known = parsed
    skew = moment - now
    if not zone_known:
        local = skew + time.localtime(now).tm_gmtoff        # the same wall time, read as local
        if abs(local) < abs(skew):
            skew = local
        if any_zone:
            zone = min(max(round(skew / ZONE_STEP_S) * ZONE_STEP_S, ZONES_S[0]), ZONES_S[1])
            if abs(skew - zone) < abs(skew):
                skew -= zone
    return skew


class Authenticator:
    """Checks the signature of a call against ``{access_key: secret_key}``, and that its
    date-time is within ``max_clock_skew_s`` of ``clock()`` (0: not checked)."""

    def __init__(self, credentials: dict[str, str], max_clock_skew_s: float = MAX_CLOCK_SKEW_S,
                 clock: Callable[[], float] = time.time, any_zone: bool = False) -> None:
        self.credentials = dict(credentials)
        self.max_clock_skew_s = max_clock_skew_s
        self.any_zone = any_zone
        self.clock = clock
        self._last_date_time: tuple = ("", None)    # clients send one text per second: parse it once

    def check_pairs(self, pairs) -> Optional[str]:
        """:meth:`check` of gRPC invocation metadata (``(key, value)`` pairs; binary
        values ignored)."""
        md = {}
        for k, v in pairs or ():
            if k == "authorization" or k == "x-mq-date-time":
                if isinstance(v, bytes):
                    continue
                md[k] = v
        return self.check(md)

    def check(self, metadata: dict) -> Optional[str]:
        """None when the call's ``metadata`` (header -> value) is signed by a known key at
        a time near the server's clock, else why it is refused."""
        value = metadata.get("authorization")
        if not value:
            return "no authorization header: this server requires an access key"
        fields = parse_authorization(value)
        if fields is None:
            return f"authorization is not {ALGORITHM}"
        access_key = fields.get("Credential", "").split("/", 1)[0]
        secret = self.credentials.get(access_key)
        if secret is None:
            return f"unknown access key {access_key!r}"
        if "x-mq-date-time" not in fields.get("SignedHeaders", "").split(";"):
            return "x-mq-date-time is not among the signed headers"
        date_time = metadata.get("x-mq-date-time", "")
        expected = sign(secret, date_time)
        if not date_time or not hmac.compare_digest(expected, fields.get("Signature", "").lower()):
            return "signature does not match"
        if self.max_clock_skew_s:
            last_text, parsed = self._last_date_time
            if date_time != last_text:
                parsed = parse_date_time(date_time)
                self._last_date_time = (date_time, parsed)
            skew = clock_skew(date_time, self.clock(), parsed, self.any_zone)
            if skew is None:
                return (f"x-mq-date-time {date_time[:40]!r} is not a date-time (yyyyMMdd'T'HHmmss'Z' "
                        f"or RFC 3339)")
            if abs(skew) > self.max_clock_skew_s:
                return (f"x-mq-date-time {date_time!r} is {_span(skew)} the server's clock, more than the "
                        f"{self.max_clock_skew_s:g} s allowed (a replayed request, a wrong clock, or a client "
                        f"writing local time in another time zone than the server's: --clock-zones any)")
        return None


def _span(skew: float) -> str:
    """``'1h 2m 3s behind'`` / ``'... ahead of'``."""
    n = int(abs(skew))
    h, rem = divmod(n, 3600)
    text = (f"{h}h " if h else "") + f"{rem // 60}m {rem % 60}s"
    return f"{text} behind" if skew < 0 else f"{text} ahead of"
