"""Tag subscriptions: RocketMQ's tag expression (``"TagA || TagB"``, ``"*"``).

``SubscriptionData`` in RocketMQ keeps the tag set and the set of their Java hash codes;
the broker filters consume-queue entries by hash code and the client by the real tag. pymq
does both in the store, so a hash collision never returns a message with another tag.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from pymq._core.record import java_hash_code

SUB_ALL = "*"


@dataclasses.dataclass(frozen=True)
class TagFilter:
    """A parsed tag expression: ``tags`` (str) and their ``codes`` (Java hash codes)."""

    tags: tuple[str, ...]
    codes: tuple[int, ...]
    names_utf8: tuple[bytes, ...]

    def matches(self, tag: Optional[str]) -> bool:
        return tag in self.tags


def parse_tag_expression(expression: Optional[str]) -> Optional[TagFilter]:
    """Parse ``"TagA || TagB"``; ``None``, ``""`` and ``"*"`` mean every message (None)."""
    if expression is None:
        return None
    if not isinstance(expression, str):
        raise TypeError(f"a tag expression is a str, not {type(expression).__name__}")
    expr = expression.strip()
    if not expr or expr == SUB_ALL:
        return None
    tags = []
    for part in expr.split("||"):
        tag = part.strip()
        if tag and tag not in tags:
            tags.append(tag)
    if not tags:
        return None
    return TagFilter(tuple(tags), tuple(java_hash_code(t) for t in tags),
                     tuple(t.encode("utf-8") for t in tags))
