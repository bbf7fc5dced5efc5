"""RocketMQ 5's topic and group attributes: which exist, their values, and how an admin
request alters them.

mqadmin 5.x sends a topic's attributes as the ``attributes`` field of
``UPDATE_AND_CREATE_TOPIC`` (``updateTopic -a "+message.type=FIFO,-reserve.time"``) and a
group's as the ``attributes`` object of ``UPDATE_AND_CREATE_SUBSCRIPTIONGROUP``'s body,
its keys prefixed the same way. Each entry is an alteration: ``+name=value`` adds or
changes, ``-name`` removes. The broker merges them into what the topic or group already
has (a request without attributes, from a 4.x mqadmin, keeps them all):

- a new topic or group may only add (``only add attribute is supported while creating
  topic. key: name``);
- an unknown name is refused (``unsupported key: name``), and so is removing one that is
  not there (``attempt to delete a nonexistent key: name``), changing one that cannot
  change after creation (``attempt to update an unchangeable attribute. key: name``), a
  name given twice, and a value outside its attribute's set or range.

The names and values are RocketMQ 5.5's (``TopicAttributes``, ``SubscriptionGroupAttributes``).
pymq refuses the values it does not implement: a ``BatchCQ`` queue type and ``COMPACTION``
cleanup (RocketMQ accepts them), so a topic never claims a behaviour it does not have.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Optional

from pymq._core.appender import validate_topic

from .topic_message_type import TOPIC_MESSAGE_TYPES

LONG_MAX = (1 << 63) - 1


class Attribute(NamedTuple):
    """One attribute: its name, whether it may change after creation, and its values:
    ``values`` (a set), or ``low``..``high`` (a long), or ``kind`` "bool" / "topic"."""

    name: str
    changeable: bool
    values: Optional[frozenset] = None
    low: Optional[int] = None
    high: Optional[int] = None
    kind: str = "enum"
    unsupported: frozenset = frozenset()      # values RocketMQ takes and pymq refuses

    def verify(self, value: str) -> None:
        """Raises ValueError, worded as RocketMQ words it, for a value out of bounds."""
        if self.kind == "enum":
            if value not in self.values:
                raise ValueError(f"value is not in set: [{', '.join(sorted(self.values))}]")
            if value in self.unsupported:
                raise ValueError(f"{self.name}={value} is not supported by pymq")
        elif self.kind == "long":
            try:
                number = int(value)
            except ValueError:
                raise ValueError(f'For input string: "{value}"') from None
            if not self.low <= number <= self.high:
                raise ValueError(f"value is not in range({self.low}, {self.high})")
        elif self.kind == "bool":
            if value.lower() not in ("true", "false"):
                raise ValueError("boolean attribute format is wrong.")
        elif self.kind == "topic":
            if not value.strip() or validate_topic(value, "utf8") is not None or " " in value:
                raise ValueError(f"{self.name} must be a legal topic name: {value!r}")


def _enum(name: str, changeable: bool, values, unsupported=()) -> Attribute:
    return Attribute(name, changeable, frozenset(values), unsupported=frozenset(unsupported))


def _long(name: str, low: int, high: int) -> Attribute:
    return Attribute(name, True, low=low, high=high, kind="long")


TOPIC_ATTRIBUTES: Mapping[str, Attribute] = {a.name: a for a in (
    _enum("queue.type", False, ("BatchCQ", "SimpleCQ"), unsupported=("BatchCQ",)),
    _enum("cleanup.policy", False, ("DELETE", "COMPACTION"), unsupported=("COMPACTION",)),
    _enum("message.type", True, ("UNSPECIFIED",) + TOPIC_MESSAGE_TYPES),
    _long("reserve.time", -1, LONG_MAX),
    _long("lite.topic.expiration", -1, 30 * 24 * 60),
)}

GROUP_ATTRIBUTES: Mapping[str, Attribute] = {a.name: a for a in (
    _long("priority.factor", 0, 100),
    Attribute("lite.bind.topic", True, kind="topic"),
    _enum("lite.sub.model", True, ("Shared", "Exclusive")),
    Attribute("lite.sub.reset.offset.exclusive", True, kind="bool"),
    Attribute("lite.sub.reset.offset.unsubscribe", True, kind="bool"),
    _long("lite.sub.client.quota", -1, LONG_MAX),
    _long("lite.sub.client.max.event.cnt", 10, LONG_MAX),
)}


def parse_alterations(text: Optional[str]) -> dict:
    """``"+a=1,-b"`` -> ``{"+a": "1", "-b": ""}`` (the request header's form); empty for
    None or ""."""
    out: dict = {}
    if not text:
        return out
    for item in text.split(","):
        key, eq, value = item.partition("=")
        if eq and not key.startswith("+"):
            raise ValueError(f"add/alter attribute format is wrong: {key}")
        if not eq and not key.startswith("-"):
            raise ValueError(f"del attribute format is wrong: {key}")
        if key in out:
            raise ValueError(f"key duplication: {key}")
        out[key] = value
    return out


def alter_attributes(create: bool, known: Mapping[str, Attribute], current: Mapping[str, str],
                     alterations: Mapping[str, str]) -> dict:
    """The attributes after ``alterations`` (``{"+name": value, "-name": ""}``) are applied
    to ``current``; ``create`` when the topic or group is new. Raises ValueError with
    RocketMQ's remark for a refused alteration (nothing is changed then)."""
    final = dict(current)
    seen: set = set()
    for key, value in alterations.items():
        sign, name = key[:1], key[1:]
        if not name or "+" in name or "-" in name:
            raise ValueError("kv string format wrong.")
        if name in seen:
            raise ValueError(f"alter duplication key. key: {name}")
        seen.add(name)
        if sign not in ("+", "-"):
            raise ValueError(f"wrong format key: {name}")
        if create and sign != "+":
            raise ValueError(f"only add attribute is supported while creating topic. key: {name}")
        attribute = known.get(name)
        if attribute is None:
            raise ValueError(f"unsupported key: {name}")
        if sign == "-":
            if name not in current:
                raise ValueError(f"attempt to delete a nonexistent key: {name}")
            if not attribute.changeable:
                raise ValueError(f"attempt to update an unchangeable attribute. key: {name}")
            final.pop(name, None)
            continue
        if not create and not attribute.changeable:
            raise ValueError(f"attempt to update an unchangeable attribute. key: {name}")
        attribute.verify(value)
        final[name] = value
    return final
