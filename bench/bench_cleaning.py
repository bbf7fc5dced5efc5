"""What cleaning costs the puts that run while it deletes segments, with the noise of a
shared VM averaged out: ``pymq bench``'s put_while_cleaning rows (cleaning on and off),
repeated alternately and reported as medians.

    python bench/bench_cleaning.py [--repeats 8]
"""

from __future__ import annotations

import argparse
import statistics

from pymq.benchmark.retention import PymqPutNotCleaning, PymqPutWhileCleaning
from pymq.benchmark.runner import parse_args, time_once


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=8, help="repeats of each row, interleaved (default 8)")
    args = ap.parse_args(argv)
    opts = parse_args(["--workload", "put_while_cleaning", "--repeat", "1"])
    rates: dict[str, list[float]] = {"cleaning": [], "not cleaning": []}
    p50: dict[str, list[float]] = {"cleaning": [], "not cleaning": []}
    deleted = []
    rows = (("cleaning", PymqPutWhileCleaning), ("not cleaning", PymqPutNotCleaning))
    for i in range(args.repeats):
        for name, cls in rows if i % 2 == 0 else rows[::-1]:
            w = cls(opts)
            n = w.message_count()
            ns, samples = time_once(w, n)
            rates[name].append(n / (ns / 1e9))
            p50[name].append(statistics.median(samples))
            if w.cleaning:
                deleted.append(w.deleted_during)
    for name in rates:
        print(f"{name:13s} median {statistics.median(rates[name]):10,.0f} puts/s  "
              f"(min {min(rates[name]):,.0f}, max {max(rates[name]):,.0f})  p50 {statistics.median(p50[name]):.0f} ns")
    print(f"segments deleted during the timed puts: {deleted}")
    print(f"cleaning / not cleaning (medians): {statistics.median(rates['cleaning']) / statistics.median(rates['not cleaning']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
