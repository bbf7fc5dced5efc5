"""Access-key authentication: RocketMQ 5's request signature.

A client with credentials sends, on every call, the header ``x-mq-date-time`` (its clock as
``yyyyMMdd'T'HHmmss'Z'``) and ``authorization``::

    MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is HMAC-SHA1 of the date-time text under the secret key, in hex. The
server recomputes it with the secret of the access key named; a call without it, with an
unknown key or a wrong signature is answered ``UNAUTHORIZED`` and reaches nothing. As in
RocketMQ, the date-time is not checked against the server's clock (use TLS against
replays on an untrusted network).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Optional

ALGORITHM = "MQv2-HMAC-SHA1"


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


class Authenticator:
    """Checks the signature of a call against ``{access_key: secret_key}``."""

    def __init__(self, credentials: dict[str, str]) -> None:
        self.credentials = dict(credentials)

    def check(self, metadata: dict) -> Optional[str]:
        """None when the call's ``metadata`` (header -> value) is signed by a known key,
        else why it is refused."""
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
        return None
