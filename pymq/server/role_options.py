"""The replication options of ``pymq serve``: the broker's role, its master, its HA port
and RocketMQ's ``broker.conf``.

* ``--broker-role async_master|sync_master|slave`` (``brokerRole``; default async_master,
  RocketMQ's): the store opens with that ``broker_role``.
* ``--master HOST:PORT``: a slave's master HA address (``haMasterAddress``), where the
  commit log is replicated from.
* ``--master-broker HOST:PORT``: the master's broker (remoting) address, where a slave
  fetches topics, groups, consumer and delay offsets every 10 s (``SlaveSynchronize``).
  RocketMQ's slave learns it from the name server's answer to its registration; without a
  name server it is derived from ``--master`` as RocketMQ lays its ports out (the HA port
  is the broker port + 1), so ``--master 10.0.0.1:10912`` means the broker 10.0.0.1:10911.
* ``--ha-port P|off`` (``haListenPort``): where this broker serves its HA port, master or
  slave as in RocketMQ; default the broker port + 1 (any free port when the broker port is
  picked, ``--broker-port 0``), ``off`` for none.
* ``--broker-config FILE``: a RocketMQ ``broker.conf`` (:mod:`.broker_conf`); options given
  on the command line win.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from pymq.errors import PymqError

from .broker_conf import apply_broker_conf

ROLES = ("async_master", "sync_master", "slave")


def _role(text: str) -> str:
    role = text.strip().lower()
    if role not in ROLES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(ROLES)}")
    return role


def _address(text: str) -> str:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return f"{host}:{int(port)}"


def add_role_arguments(parser: argparse.ArgumentParser, port_type) -> None:
    """The role, master, HA-port and broker.conf options (``port_type`` reads a port or
    ``off``)."""
    parser.add_argument("--broker-role", type=_role, default="async_master",
                        help="async_master (default), sync_master (a send is acknowledged once a slave has it) "
                             "or slave (replicates --master, serves reads, refuses writes); RocketMQ's brokerRole")
    parser.add_argument("--master", type=_address, default=None, metavar="HOST:PORT",
                        help="a slave's master HA address (haMasterAddress), e.g. 127.0.0.1:10912")
    parser.add_argument("--master-broker", type=_address, default=None, metavar="HOST:PORT",
                        help="a slave's master broker (remoting) address, where topics, groups and offsets are "
                             "synced from every 10 s (default: --master's port - 1, RocketMQ's layout)")
    parser.add_argument("--ha-port", type=port_type, default=-1, metavar="P",
                        help="HA port served to slaves (haListenPort; default the broker port + 1; 0 picks one; "
                             "off: none)")
    parser.add_argument("--broker-config", default=None, metavar="FILE",
                        help="RocketMQ broker.conf to read (brokerRole, haMasterAddress, listenPort, brokerName, "
                             "flushDiskType, storePathRootDir, ...); command-line options win, unknown keys are "
                             "warned about and ignored")
    parser.add_argument("--slave-sync-interval", type=float, default=10.0, metavar="S",
                        help="a slave syncs topics, groups and offsets from its master every S seconds (default 10, "
                             "RocketMQ's)")
    parser.set_defaults(serve_parser=parser)


def option_defaults(args: argparse.Namespace) -> dict:
    """dest -> default of every ``pymq serve`` option, the store's included (what
    ``--store`` would be if not given: ``$PYMQ_STORE``, else ``~/store``)."""
    parser = getattr(args, "serve_parser", None)
    defaults = {a.dest: a.default for a in parser._actions} if parser is not None else {}
    defaults["store"] = os.path.expanduser(os.environ.get("PYMQ_STORE", "").strip() or os.path.join("~", "store"))
    return defaults


def read_broker_config(args: argparse.Namespace) -> dict:
    """Apply ``--broker-config`` to ``args`` (warnings on stderr); what it set."""
    if not args.broker_config:
        return {}
    def warn(line: str) -> None:
        print(f"pymq serve: WARNING: {line}", file=sys.stderr, flush=True)
    taken = apply_broker_conf(args, args.broker_config, option_defaults(args), warn)
    if "store" in taken:
        args.store = os.path.expanduser(args.store)
    return taken


def master_broker_address(args: argparse.Namespace) -> Optional[str]:
    """The master's broker address a slave syncs its tables from: ``--master-broker``,
    else ``--master``'s host with the port below the HA port; None on a master."""
    if args.broker_role != "slave":
        return None
    if args.master_broker:
        return args.master_broker
    if args.master:
        host, _, port = args.master.rpartition(":")
        return f"{host}:{int(port) - 1}"
    return None


def apply_role(args: argparse.Namespace, store_config, broker_port: Optional[int]) -> None:
    """Set the store's replication fields from the options: ``broker_role``,
    ``ha_master_address``, ``ha_listen_port`` (the broker port + 1 unless given) and
    ``ha_listen_host`` (the bound host). ``broker_port`` is the bound broker port, or None."""
    role = args.broker_role.upper()
    if args.master and role != "SLAVE":
        raise PymqError("serve: --master is a slave's option (--broker-role slave)")
    if args.master_broker and role != "SLAVE":
        raise PymqError("serve: --master-broker is a slave's option (--broker-role slave)")
    if role == "SLAVE" and not args.master and not getattr(args, "namesrv_addr", None):
        raise PymqError("serve: a slave needs its master: --master HOST:PORT (its HA address)")
    broker_id = getattr(args, "broker_id", None)
    if role == "SLAVE" and broker_id is not None and broker_id <= 0:
        raise PymqError("serve: a slave's broker id must be > 0 (RocketMQ's brokerId; 0 is the master's)")
    store_config.broker_role = role
    store_config.ha_master_address = args.master
    if args.ha_port == -1:
        # default: the broker port + 1, as RocketMQ lays it out; beside a picked broker port
        # (--broker-port 0) a picked one too (the port above may be anyone's)
        if not broker_port:
            store_config.ha_listen_port = None
        else:
            store_config.ha_listen_port = broker_port + 1 if args.broker_port else 0
    else:
        store_config.ha_listen_port = args.ha_port
    store_config.ha_listen_host = args.host
    store_config.validate()
