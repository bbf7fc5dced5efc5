"""RocketMQ's rules for the names clients send (``TopicValidator``, ``Validators``).

Topic and consumer-group names match ``[%|a-zA-Z0-9_-]+`` as a whole (``re.fullmatch``, as
Java's ``Matcher.matches``: ``re.match`` with ``$`` would let a trailing newline through),
topics up to 127 characters, groups up to 255. A group may not be named like a group's retry or dead-letter topic
(``%RETRY%...``, ``%DLQ%...``): its own topics would be ``%RETRY%%RETRY%...``. System
topics (the broker's own queues: retry, dead-letter, schedule, transaction topics and the
like) may not be written by clients; the broker's internal ones (all of them but a group's
retry and dead-letter topics) may not be created, changed or deleted by admin calls either.
System consumer groups (``CID_RMQ_SYS_...``) are the broker's own. The protocol adapters
turn a problem into their own error codes.
"""

from __future__ import annotations

import re
from typing import Optional

NAME_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")        # whole names only: NAME_PATTERN.fullmatch
#: Java's ``Character.isISOControl`` (C0, DEL, C1): what RocketMQ 5's proxy refuses in tags,
#: keys, message groups and user properties (``GrpcValidator.containControlCharacter``)
CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
GROUP_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%")          # a group's retry / dead-letter topic
INTERNAL_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC_")
SYSTEM_TOPIC_PREFIXES = INTERNAL_TOPIC_PREFIXES + GROUP_TOPIC_PREFIXES
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
SYSTEM_TOPICS = frozenset({"TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest",
                           "TRANS_CHECK_MAX_TIME_TOPIC"})


def topic_problem(name: str) -> Optional[str]:
    """Why ``name`` is not a valid topic name, or None."""
    if not isinstance(name, str) or not name or len(name) > TOPIC_MAX_LENGTH or not NAME_PATTERN.fullmatch(name):
        return (f"topic {name!r} is illegal: it must match [%|a-zA-Z0-9_-]+ and be at most "
                f"{TOPIC_MAX_LENGTH} characters")
    return None


def is_system_topic(name: str) -> bool:
    """True for the broker's own topics, which clients may not send to directly."""
    return name.startswith(SYSTEM_TOPIC_PREFIXES) or name in SYSTEM_TOPICS


def is_internal_topic(name: str) -> bool:
    """True for the broker's internal topics (schedule, timer, revive, transaction and the
    reserved names): system topics other than a group's retry and dead-letter topics. Admin
    calls may not create, change or delete them (``AdminBrokerProcessor``)."""
    return is_system_topic(name) and not name.startswith(GROUP_TOPIC_PREFIXES)


def group_problem(name: str) -> Optional[str]:
    """Why ``name`` is not a valid consumer or producer group name, or None."""
    if not isinstance(name, str) or not name or len(name) > GROUP_MAX_LENGTH or not NAME_PATTERN.fullmatch(name):
        return (f"group {name!r} is illegal: it must match [%|a-zA-Z0-9_-]+ and be at most "
                f"{GROUP_MAX_LENGTH} characters")
    if name.startswith(GROUP_TOPIC_PREFIXES):
        return f"group {name!r} is illegal: it is named like a group's retry or dead-letter topic"
    return None


def has_control_character(text: str) -> bool:
    """True when ``text`` holds a character Java calls an ISO control (U+0000..U+001F,
    U+007F..U+009F)."""
    return CONTROL_CHARACTER.search(text) is not None


def is_system_group(name: str) -> bool:
    """True for the broker's own consumer groups (``CID_RMQ_SYS_...``), which clients may
    not use (RocketMQ 5's proxy: ``MixAll.isSysConsumerGroup``)."""
    return name.startswith(SYSTEM_GROUP_PREFIX)
