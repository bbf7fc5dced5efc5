"""What a SYNC_MASTER put waits for (RocketMQ's ``CommitLog.handleHA``).

A put that was stored (PUT_OK, after the flush its ``flush_disk_type`` asks for) is
acknowledged only once a slave acknowledged an offset at or past its end:

* no HA service, no slave connected, or the slaves' highest acknowledged offset more
  than ``ha_max_gap_not_in_sync`` behind the put: SLAVE_NOT_AVAILABLE at once;
* no acknowledgement within ``sync_flush_timeout``: FLUSH_SLAVE_TIMEOUT.

The message is stored either way (a later slave gets it), as in RocketMQ; the status
only tells the producer it is not yet on two machines.
"""

from __future__ import annotations

from concurrent.futures import Future

from pymq.status import PutMessageStatus
from pymq.store.flush_service import GroupCommitRequest


def wait_replicated(ha, result, timeout_s: float) -> None:
    """Block until a slave has ``result``'s bytes; set its status when it does not."""
    if result.status is not PutMessageStatus.PUT_OK:
        return
    end = result.commitlog_offset + result.wrote_bytes
    if ha is None or not ha.is_slave_ok(end):
        result.set_status(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        return
    req = GroupCommitRequest(end)
    ha.put_request(req, timeout_s)
    if not req.wait(timeout_s):
        result.set_status(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)


def replicated_future(ha, flushed: Future, timeout_s: float) -> Future:
    """A future of the put result once ``flushed`` (the put's flush future) is done and a
    slave acknowledged its bytes; no thread waits meanwhile."""
    fut: Future = Future()
    fut.set_running_or_notify_cancel()
    result = fut.put_result = flushed.put_result

    def after_flush(_f: Future) -> None:
        if result.status is not PutMessageStatus.PUT_OK:
            fut.set_result(result)
            return
        end = result.commitlog_offset + result.wrote_bytes
        if ha is None or not ha.is_slave_ok(end):
            result.set_status(PutMessageStatus.SLAVE_NOT_AVAILABLE)
            fut.set_result(result)
            return

        def replicated(ok: bool) -> None:
            if not ok:
                result.set_status(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            fut.set_result(result)
        ha.put_request(GroupCommitRequest(end, replicated), timeout_s)

    flushed.add_done_callback(after_flush)
    return fut
