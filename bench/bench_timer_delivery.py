"""How late the timer service delivers a second's worth of timer messages: N messages due
in one second, spread over its milliseconds or all at one millisecond (a burst), on a
fresh store; the figure is the time from the first due millisecond until the last of them
is readable in its topic. A spread second has an ideal of about 0.9 s (its last message
is due 0.9 s in); a burst has an ideal of 0. Repeated alternately, medians reported.

    python bench/bench_timer_delivery.py [--messages 50000] [--repeats 4]

Recall's cost shows here: when a millisecond comes, the timer service looks for delete
marks among its units (docs/delivery.md).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import pymq


def delivery_lateness(n: int, spread: bool) -> float:
    with tempfile.TemporaryDirectory() as d:
        cfg = pymq.StoreConfig(timer_wheel_days=1, timer_max_delay_sec=3600, warm_mapped_file_enable=False)
        with pymq.MessageStore(d, cfg) as s:
            due = (int(time.time()) + 3) * 1000
            for i in range(n):
                at = due + (i % 900 if spread else 0)
                assert s.put_message(pymq.Message("T", b"x" * 100, queue_id=0, deliver_time_ms=at)).is_ok()
            while time.time() * 1000 < due:
                time.sleep(0.005)
            t0 = time.time()
            while s.get_max_offset_in_queue("T", 0) < n:
                time.sleep(0.005)
            return time.time() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args(argv)
    runs: dict[str, list[float]] = {"spread over the second": [], "one millisecond": []}
    for i in range(args.repeats):
        order = [True, False] if i % 2 == 0 else [False, True]
        for spread in order:
            runs["spread over the second" if spread else "one millisecond"].append(
                delivery_lateness(args.messages, spread))
    for name, xs in runs.items():
        print(f"{args.messages:,} timers, {name:22s}: last delivered {statistics.median(xs):.2f} s after the "
              f"first was due (median; min {min(xs):.2f}, max {max(xs):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
