"""A SYNC_MASTER store in its own process, putting messages as fast as it can: run as
``python ha_master_process.py STORE_DIR START_SEQ``. Prints ``PORT n`` once its HA port is
bound, waits for a slave, then ``ACK seq offset size`` for every put acknowledged PUT_OK
(flushed line by line), until it is killed."""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from pymq import Message, MessageStore, PutMessageStatus, StoreConfig  # noqa: E402


def main() -> None:
    path, seq = sys.argv[1], int(sys.argv[2])
    cfg = StoreConfig(broker_role="SYNC_MASTER", ha_listen_port=0, commitlog_file_size=256 * 1024,
                      consume_queue_entries=64, index_hash_slots=64, index_max_entries=256,
                      warm_mapped_file_enable=False, sync_flush_timeout=2000)
    store = MessageStore(path, cfg).start()
    out = sys.stdout
    out.write(f"PORT {store.ha.port}\n")
    out.flush()
    while not store.ha.connections():
        time.sleep(0.005)
    while True:
        body = b"seq-%d-" % seq + os.urandom(20 + seq % 300)
        r = store.put_message(Message("KillTopic", body, keys=f"s{seq}", queue_id=seq % 4))
        if r.status is PutMessageStatus.PUT_OK:
            out.write(f"ACK {seq} {r.commitlog_offset} {r.wrote_bytes}\n")
            out.flush()
        seq += 1


if __name__ == "__main__":
    main()
