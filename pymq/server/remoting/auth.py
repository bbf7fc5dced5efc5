"""Access-key signatures of remoting requests (RocketMQ 4.x ACL, ``AclClientRPCHook``).

A signing client adds ``AccessKey`` (and ali-ons ``OnsChannel``) to a request's ext fields,
then ``Signature`` = base64(HMAC-SHA1(secret, content)), where content is the values of
every ext field but ``Signature``, in the order of their names, concatenated as UTF-8,
followed by the body. The server recomputes it with the secret of the access key.

As in RocketMQ 4.9.7 (``AclUtils.combineRequestContent``), the content has no separators
and no field names, and no date: text can move between adjacent fields under one signature,
and a captured request stays valid. Changing the content would refuse every 4.x client, so
it is kept; docs/remoting.md says so. :meth:`RemotingAuthenticator.knows` is what can be
told from a header before its body arrives (:mod:`.admission`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from .codes import ResponseCode
from .headers import RequestError


def sign(secret: str, ext_fields: dict, body: bytes) -> str:
    """The signature a client computes over ``ext_fields`` (without ``Signature``) and
    ``body``."""
    content = "".join(str(ext_fields[k]) for k in sorted(ext_fields) if k != "Signature").encode() + bytes(body)
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


class RemotingAuthenticator:
    """Checks requests against ``{access_key: secret_key}``."""

    def __init__(self, credentials: dict[str, str]) -> None:
        self.credentials = dict(credentials)

    def knows(self, cmd) -> bool:
        """True when ``cmd``'s header names a known access key and carries a signature
        (read before its body arrives; the signature itself covers the body)."""
        ext = cmd.ext_fields
        return bool(ext.get("Signature")) and ext.get("AccessKey") in self.credentials

    def check(self, cmd) -> None:
        """Raise :class:`RequestError` (``NO_PERMISSION``) unless ``cmd`` is signed with a
        known access key."""
        ext = cmd.ext_fields
        access_key = ext.get("AccessKey")
        signature = ext.get("Signature")
        if not access_key or not signature:
            raise RequestError(ResponseCode.NO_PERMISSION, "this broker requires signed requests (AccessKey, Signature)")
        secret = self.credentials.get(access_key)
        if secret is None or not hmac.compare_digest(sign(secret, ext, cmd.body), signature):
            raise RequestError(ResponseCode.NO_PERMISSION, "access key or signature not accepted")
