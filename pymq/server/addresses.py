"""Addresses the servers hand to clients."""

from __future__ import annotations

from typing import Optional

_ANY = ("0.0.0.0", "::", "")


def route_host(bind_host: str, advertised_host: Optional[str]) -> str:
    """The host that routes send clients to: the advertised one, else the bound one, else
    (bound to every interface) 127.0.0.1."""
    if advertised_host:
        return advertised_host
    return "127.0.0.1" if bind_host in _ANY else bind_host
