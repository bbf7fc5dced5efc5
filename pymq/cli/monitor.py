"""``pymq stats`` and ``pymq top``: what a store is doing (``store.stats()``), once or live.

Both open the store read-only, so they work beside a running writer (``pymq serve`` or
an application): put rates are then the growth of the consume queues seen from this
process, measured over ``--sample`` seconds (``stats``) or since the start (``top``);
consumer offsets, delay offsets and the timer checkpoint are the ones the writer last
persisted (every few seconds). Pop in-flight counts (``"pop"``, as ``Broker.stats()``
has them) are rebuilt from the revive log the broker writes (:class:`PopView`), as far
as it was written; the metrics endpoint of ``pymq serve`` (``--metrics-port``) reports
the broker's own.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time

from pymq.broker.pop_view import PopView

from .arguments import INT32_MAX, bounded_float, bounded_int
from .layout import wrap_line
from .queries import _emit, _open_store, _table
from .registry import command

#: where the text of a summary line starts (after its label), the indent it wraps under
_LABEL = 11


def _size(n) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n}"


def _rate(v: float) -> str:
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def _ratio(r) -> str:
    return "-" if r is None else f"{r:.0%}"


def summary(st: dict) -> list[str]:
    """The headline lines of a stats dict (shared by ``stats`` and ``top``)."""
    tps = st["tps"]
    windows = "  ".join(f"{w} {_rate(v['put_tps'])}" for w, v in tps.items())
    gets = "  ".join(f"{w} {_rate(v['get_transferred_tps'])}" for w, v in tps.items())
    w10 = tps["10s"]
    cl, disk = st["commitlog"], st["disk"]
    lines = [
        f"store      {st['store_path']} ({'read-only view' if st['read_only'] else 'writer'}, "
        f"up {st['uptime_s']:.0f} s)",
        f"put        msgs/s {windows}; {_size(w10['put_bytes_per_s'])}/s; "
        f"{st['put']['messages_total']:,} msgs since open",
        f"get        msgs/s {gets}; {_size(w10['get_bytes_per_s'])}/s; pulls found/miss per s "
        f"{_rate(w10['get_found_tps'])}/{_rate(w10['get_miss_tps'])}",
        f"commitlog  offsets {max(cl['min_offset'], 0):,}..{cl['max_offset']:,} in {cl['segments']} segments "
        f"({_size(cl['size_bytes'])}); flush behind {_size(cl['flush_behind_bytes'])}, "
        f"dispatch behind {_size(cl['dispatch_behind_bytes'])}",
        f"disk       {_ratio(disk['used_ratio'])} used ({_size(disk['free_bytes'])} free); cleaning past "
        f"{_ratio(disk['clean_ratio'])}, forced past {_ratio(disk['clean_forcibly_ratio'])}, puts refused past "
        f"{_ratio(disk['warning_ratio'])}; files kept {disk['file_reserved_time_h']:g} h, deleted at "
        f"{disk['delete_when']}" + ("; PUTS REFUSED" if disk.get("puts_refused") else ""),
        f"pending    {st['delay']['pending']:,} delayed, {st['timer']['pending']:,} timer messages",
    ]
    failing = [s for s in st["services"] if s["failing"]]
    for s in failing:
        lines.append(f"FAILING    {s['name']}: {s['failing']} failed attempts ({s['last_error']})")
    return [wrap_line(line, _LABEL) for line in lines]


def _topic_rows(st: dict, rates: dict | None = None) -> list:
    rows = []
    for t in st["topics"]:
        row = [t["topic"], len(t["queues"]), f"{t['messages']:,}", max(q["max_offset"] for q in t["queues"])]
        if rates is not None:
            row.append(_rate(rates.get(t["topic"], 0.0)))
        rows.append(row)
    return rows


def _group_rows(st: dict) -> list:
    return [(g["group"], g["topic"], len(g["queues"]), f"{g['lag']:,}") for g in st["groups"]]


def render(st: dict, rates: dict | None = None, limit: int | None = None) -> str:
    """A stats dict as text: the summary, then topics, groups and pops."""
    out = summary(st)
    topics = _topic_rows(st, rates)
    if rates is not None:
        topics.sort(key=lambda r: -rates.get(r[0], 0.0))
    if topics:
        headers = ["Topic", "Queues", "Messages", "Max Offset"] + (["msgs/s"] if rates is not None else [])
        out += ["", _table(headers, topics[:limit], flexible=(0,))]
    groups = sorted(_group_rows(st), key=lambda r: -int(r[3].replace(",", "")))
    if groups:
        out += ["", _table(["Group", "Topic", "Queues", "Lag"], groups[:limit], flexible=(0, 1))]
    if st.get("pop"):
        out += ["", _table(["Group", "Topic", "Inflight", "Waiting", "Unread"],
                           [(p["group"], p["topic"], p["inflight"], p["waiting"], p["unread"]) for p in st["pop"]],
                           flexible=(0, 1))]
    return "\n".join(out)


def _stats_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print store.stats() as JSON")
    parser.add_argument("--sample", type=bounded_float(0, 3600), default=1.0, metavar="S",
                        help="measure rates over S seconds before printing (default 1; 0: none; at most 3600)")


@command("stats", "put/get rates, offsets, consumer lag, disk and pending deliveries of a store "
         "(store.stats(); mqadmin brokerStatus)", _stats_arguments)
def cmd_stats(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        if args.sample > 0:
            time.sleep(args.sample)
        st = store.stats()
        st["pop"] = PopView(store).rows()
    _emit(args, st, render(st))
    return 0


def _top_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interval", type=bounded_float(0, 3600, low_open=True), default=2.0, metavar="S",
                        help="refresh every S seconds (default 2; at most 3600)")
    parser.add_argument("--iterations", type=bounded_int(0, INT32_MAX), default=0, metavar="N",
                        help="stop after N refreshes (default: until q or Ctrl-C)")
    parser.add_argument("--rows", type=bounded_int(1, INT32_MAX), default=20, metavar="N",
                        help="topics and groups shown (default 20)")


class _Keys:
    """Single key presses from a terminal (cbreak mode while it lasts); nothing otherwise."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
        self.saved = None

    def __enter__(self) -> "_Keys":
        if self.fd is not None:
            import termios
            import tty
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is not None:
            import termios
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def wait(self, seconds: float) -> str:
        """Wait ``seconds`` or until a key is pressed; the key, or ""."""
        if self.fd is None:
            time.sleep(seconds)
            return ""
        ready, _, _ = select.select([self.fd], [], [], seconds)
        return os.read(self.fd, 1).decode(errors="replace") if ready else ""


@command("top", "live view of store.stats(), refreshed in the terminal (q or Ctrl-C quits)", _top_arguments)
def cmd_top(args: argparse.Namespace) -> int:
    out = sys.stdout
    tty = out.isatty()
    with _open_store(args) as store, _Keys() as keys:
        last, last_t, n = None, time.monotonic(), 0
        pops = PopView(store)
        try:
            while True:
                st = store.stats()
                st["pop"] = pops.rows()
                now = time.monotonic()
                sizes = {t["topic"]: sum(q["max_offset"] for q in t["queues"]) for t in st["topics"]}
                rates = {t: (v - last.get(t, v)) / (now - last_t) for t, v in sizes.items()} if last else {}
                last, last_t = sizes, now
                screen = (f"pymq top - {time.strftime('%H:%M:%S')} - every {args.interval:g} s, q quits\n\n"
                          + render(st, rates, args.rows))
                out.write(("\x1b[H\x1b[2J" if tty else "") + screen + "\n")
                out.flush()
                n += 1
                if args.iterations and n >= args.iterations:
                    break
                if keys.wait(args.interval).lower() == "q":
                    break
        except KeyboardInterrupt:
            pass
    return 0
