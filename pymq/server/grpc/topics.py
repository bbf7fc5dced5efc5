"""The topic facts the protocol needs (queue numbers, permission), from the broker's
``TopicConfigManager``.

A topic the broker does not know is described with the broker's default queue number when
``auto_create_topic_enable`` is on (so that a producer can route its first send, which then
creates it), and is ``TOPIC_NOT_FOUND`` otherwise, with the message RocketMQ 5's proxy
gives (the name server's 17 as its ``MQClientException`` prints it); when auto-creation is
on but ``max_topics`` is reached, pymq's reason follows it.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from pymq.broker.topic_message_type import declared_message_type

from .status import Code, RequestError

PERM_READ = 4
PERM_WRITE = 2


class TopicView(NamedTuple):
    """Queue numbers and permission bits of a topic; ``exists`` is False for a topic that
    a send would auto-create; ``message_type`` is the type it declares (5.x attribute
    ``message.type``), None when none."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    exists: bool
    message_type: Optional[str] = None


#: the status message of RocketMQ 5's proxy for a topic the name server has no route for
NO_ROUTE = ("CODE: 17  DESC: No topic route info in name server for the topic: {topic}\n"
            "For more information, please visit the url, https://rocketmq.apache.org/docs/bestPractice/06FAQ")


def no_route(broker, topic: str) -> RequestError:
    """``TOPIC_NOT_FOUND`` for ``topic``, worded as RocketMQ 5's proxy words it."""
    message = NO_ROUTE.format(topic=topic)
    if broker.broker_config.auto_create_topic_enable:
        why = broker.topic_config_manager.why_not_created(topic)
        if why:
            message += f"\n(pymq: {why})"
    return RequestError(Code.TOPIC_NOT_FOUND, message)


def _from_config(name: str, cfg) -> TopicView:
    return TopicView(name, int(cfg.read_queue_nums), int(cfg.write_queue_nums), int(cfg.perm), True,
                     declared_message_type(cfg))


def find_topic(broker, topic: str) -> TopicView:
    """The view of ``topic``; raises TOPIC_NOT_FOUND when it does not exist and would not
    be auto-created."""
    tcm = broker.topic_config_manager
    cfg = tcm.select_or_default_topic_config(topic)
    if cfg is None:
        raise no_route(broker, topic)
    return _from_config(topic, cfg)._replace(exists=tcm.select_topic_config(topic) is not None)


def topic_for_send(broker, topic: str) -> TopicView:
    """The view of ``topic`` for a send, creating it (persisted in ``config/topics.json``)
    when it is new and auto-creation is on."""
    view = find_topic(broker, topic)
    if view.exists:
        if not view.perm & PERM_WRITE:
            raise RequestError(Code.FORBIDDEN, f"topic {topic!r} is not writeable")
        return view
    tcm = broker.topic_config_manager
    cfg = tcm.create_topic_in_send_message_method(topic)
    if cfg is None:             # refused since find_topic looked (another send took the last place)
        raise no_route(broker, topic)
    return _from_config(topic, cfg)
