"""SYNC_MASTER in its own process, SIGKILLed at random points while it puts: every put it
acknowledged PUT_OK is on the (embedded) slave, byte for byte the master's record. A
master restarted on the same directory recovers and the slave continues from it.
``PYMQ_HA_KILLS`` sets the number of kills (5 in CI; 30 by hand)."""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time

from pymq import MessageStore

from ha_support import wait_until

SCRIPT = pathlib.Path(__file__).with_name("ha_master_process.py")


def _start_master(path, seq):
    p = subprocess.Popen([sys.executable, str(SCRIPT), str(path), str(seq)], stdout=subprocess.PIPE,
                         text=True, bufsize=1)
    line = p.stdout.readline()
    assert line.startswith("PORT "), line
    return p, f"127.0.0.1:{int(line.split()[1])}"


def test_sigkill_loses_no_acknowledged_put(tmp_path, config_factory):
    kills = int(os.environ.get("PYMQ_HA_KILLS", "5"))
    rng = random.Random(int(os.environ.get("PYMQ_HA_KILL_SEED", "28")))
    mdir = tmp_path / "master"
    slave = MessageStore(tmp_path / "slave", config_factory(broker_role="SLAVE",
                                                            commitlog_file_size=256 * 1024)).start()
    acked: dict[int, tuple[int, int]] = {}
    seq = 0
    try:
        for _ in range(kills):
            proc, address = _start_master(mdir, seq)
            slave.ha.update_master_address(address)
            lines: list[str] = []
            reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
            reader.start()
            time.sleep(rng.uniform(0.3, 1.2))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            reader.join(10)
            for line in lines:
                if line.startswith("ACK "):
                    _, s, off, size = line.split()
                    acked[int(s)] = (int(off), int(size))
            # each acknowledged put was on the slave when acknowledged: check it there now
            for s, (off, size) in acked.items():
                m = slave.look_message_by_offset(off)
                assert m is not None and m.body.startswith(b"seq-%d-" % s), (s, off)
            seq = max(acked, default=seq) + 1000          # new bodies after a restart
        assert len(acked) > kills * 10, len(acked)
        # the master reopened (recovered after the last kill) holds the slave's records byte for byte
        slave.ha.update_master_address(None)
        master = MessageStore(mdir, config_factory(commitlog_file_size=256 * 1024))
        try:
            for s, (off, size) in acked.items():
                assert master.select_one_message_by_offset(off) == slave.select_one_message_by_offset(off)
            assert wait_until(lambda: slave.get_max_offset_in_queue("KillTopic", 0) > 0)
        finally:
            master.shutdown()
        print(f"\n{kills} kills, {len(acked)} acknowledged puts, none lost")
    finally:
        slave.shutdown()
