"""What a broker's role (RocketMQ's ``brokerRole``) changes in the broker layer.

The role is the store's setting (:attr:`pymq.StoreConfig.broker_role`: ``ASYNC_MASTER``,
``SYNC_MASTER`` or ``SLAVE``), as ``MessageStoreConfig.brokerRole`` is RocketMQ's. A master
takes writes; a slave's commit log is its master's, replicated byte for byte, so nothing
of its own may be appended to it. As RocketMQ 4.9.7's broker (``BrokerController``,
``DefaultMessageStore``):

* puts on a slave are refused with ``SERVICE_NOT_AVAILABLE`` (``checkStoreStatus``: "broke
  role is slave, so putMessage is forbidden"); a send therefore gets response code 14, a
  consumer's send-back ``SYSTEM_ERROR`` with the remark ``SERVICE_NOT_AVAILABLE``, an
  end-transaction ``SLAVE_NOT_AVAILABLE`` before anything is looked at;
* the services that write on their own do not run on a slave: delay-level and timer
  delivery (``handleScheduleMessageService``), the transaction check
  (``startProcessorByHa``), pop revive;
* topic and group admin calls are refused (``AdminBrokerProcessor.validateSlave``);
* pulls are served, without committing the pull's offset; offset commits
  (``UPDATE_CONSUMER_OFFSET``) are kept locally until the next metadata sync overwrites
  them (:mod:`pymq.server.remoting.slave_sync`).

pymq also refuses, with :class:`SlaveWriteError`, the broker calls that would put messages
on a slave (transaction ends, recalls, forwards to the dead-letter queue): a 4.9.7 slave's
store refuses each of their puts the same way. Pop, ack and invisibility changes are
served, their state kept in memory only (:mod:`.slave_pop`), as a 5.x slave keeps its pop
checkpoints in memory.
"""

from __future__ import annotations

from pymq._core.appender import PutMessageResult
from pymq.errors import StoreStateError
from pymq.status import PutMessageStatus

ASYNC_MASTER = "ASYNC_MASTER"
SYNC_MASTER = "SYNC_MASTER"
SLAVE = "SLAVE"
ROLES = (ASYNC_MASTER, SYNC_MASTER, SLAVE)

#: RocketMQ's broker id of a master (``MixAll.MASTER_ID``); a slave's is above it
MASTER_ID = 0

#: ``AdminBrokerProcessor.validateSlave``'s remark (response code SYSTEM_ERROR)
ADMIN_ON_SLAVE_REMARK = ("Can't modify topic or subscription group from slave broker, "
                         "please execute it from master broker.")


class SlaveWriteError(StoreStateError):
    """A call that would write to a slave broker's store (pop, ack, transaction end ...):
    a slave's commit log is its master's, so writes go to the master."""


def refused_put() -> PutMessageResult:
    """What a put on a slave returns: ``SERVICE_NOT_AVAILABLE``, nothing written."""
    r = PutMessageResult()
    r.set_status(PutMessageStatus.SERVICE_NOT_AVAILABLE)
    return r


def check_writable(role: str, what: str) -> None:
    """Raise :class:`SlaveWriteError` when ``role`` is ``SLAVE``; ``what`` names the call."""
    if role == SLAVE:
        raise SlaveWriteError(f"{what} is refused: this broker is a slave (brokerRole SLAVE); "
                              f"send it to the master")
