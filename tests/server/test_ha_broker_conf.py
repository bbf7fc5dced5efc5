"""RocketMQ's broker.conf read by ``pymq serve --broker-config`` (:mod:`pymq.server.broker_conf`):
Java properties syntax, the keys mapped to options, command-line options winning, unknown
keys reported, bad values refused by name; and the role options' checks."""

from __future__ import annotations

import argparse

import pytest

from pymq.errors import PymqError
from pymq.server import serve
from pymq.server.broker_conf import parse_broker_conf, read_properties
from pymq.server.role_options import apply_role, master_broker_address, read_broker_config

CONF = r"""
# a slave, as RocketMQ's conf/2m-2s-async/broker-a-s.properties writes it
brokerClusterName=DefaultCluster
brokerName = broker-a
brokerId: 1
deleteWhen=04
fileReservedTime=48
brokerRole=SLAVE
flushDiskType=SYNC_FLUSH
haMasterAddress=10.0.0.1:10912
listenPort 10921
slaveReadEnable=true
autoCreateTopicEnable=false
messageDelayLevel=1s 5s \
    10s
storePathCommitLog=/data/commitlog
! a comment
someUnknownKey=\u0041
"""


def test_properties_syntax():
    pairs = dict(read_properties(CONF))
    assert pairs["brokerName"] == "broker-a" and pairs["brokerId"] == "1" and pairs["listenPort"] == "10921"
    assert pairs["messageDelayLevel"] == "1s 5s 10s"          # continued line, leading blanks dropped
    assert pairs["someUnknownKey"] == "A"


def test_keys_mapped_unknown_reported():
    values, unknown = parse_broker_conf(CONF)
    assert values["broker_role"] == "slave" and values["master"] == "10.0.0.1:10912"
    assert values["broker_port"] == 10921 and values["broker_id"] == 1 and values["flush"] == "sync"
    assert values["no_auto_create_topic"] is True and values["slave_read_enable"] is True
    assert values["broker_name"] == "broker-a" and values["cluster_name"] == "DefaultCluster"
    assert values["file_reserved_time"] == 48 and values["delete_when"] == "04"
    assert unknown == ["storePathCommitLog", "someUnknownKey"]


@pytest.mark.parametrize("line", ["brokerRole=SLAVEISH", "listenPort=ten", "flushDiskType=SOMETIMES"])
def test_bad_values_named(line):
    with pytest.raises(PymqError, match=line.split("=")[0]):
        parse_broker_conf(line)


def _args(tmp_path, *argv):
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(list(argv))
    args.store = str(tmp_path / "store")
    return args


def test_command_line_wins_and_warns_once(tmp_path, capfd):
    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    args = _args(tmp_path, "--broker-config", str(conf), "--broker-port", "20911")
    read_broker_config(args)
    assert args.broker_port == 20911                            # given: the command line's
    assert args.broker_role == "slave" and args.master == "10.0.0.1:10912" and args.flush == "sync"
    err = capfd.readouterr().err
    assert err.count("storePathCommitLog is not a setting") == 1 and "someUnknownKey" in err
    assert master_broker_address(args) == "10.0.0.1:10911"      # HA port - 1, RocketMQ's layout


def test_role_applied_to_store_config(tmp_path):
    from pymq.config import StoreConfig
    args = _args(tmp_path, "--broker-role", "slave", "--master", "127.0.0.1:10912")
    cfg = StoreConfig()
    apply_role(args, cfg, 10921)
    assert (cfg.broker_role, cfg.ha_master_address, cfg.ha_listen_port) == ("SLAVE", "127.0.0.1:10912", 10922)
    args = _args(tmp_path, "--broker-role", "sync_master", "--ha-port", "off")
    apply_role(args, cfg, 10911)
    assert (cfg.broker_role, cfg.ha_listen_port) == ("SYNC_MASTER", None)
    with pytest.raises(PymqError, match="needs its master"):
        apply_role(_args(tmp_path, "--broker-role", "slave"), StoreConfig(), 10911)
    with pytest.raises(PymqError, match="slave's option"):
        apply_role(_args(tmp_path, "--master", "h:1"), StoreConfig(), 10911)
