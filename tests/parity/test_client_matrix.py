"""The official Java 4.9.7 client's features against RocketMQ 4.9.7 and against ``pymq serve``
(issue 25): tests/java/FeatureMatrix.java (and ConsumerFeatures.java) runs each feature
once per server and prints what it saw; every feature must give the outcome written here, the same on both servers.

Both servers run with every delay level 1 s (a retry, level 3 + attempts, comes a second
later instead of 10 s) and a transaction check every second for halves a second old, so
the module takes about half a minute per server.
"""

from __future__ import annotations

import json

import pytest

DELAY_LEVELS = " ".join(["1s"] * 18)
ANY = "*"                                           # a value FeatureMatrix masks (ids, offsets of the moment)


@pytest.fixture(scope="module")
def counterpart_options() -> dict:
    return {"rocketmq": {"messageDelayLevel": DELAY_LEVELS, "transactionCheckInterval": 1000,
                         "transactionTimeOut": 1000},
            "pymq": ["--message-delay-level", DELAY_LEVELS, "--transaction-check-interval", "1000",
                     "--transaction-timeout", "1000"]}


def _props(**kw) -> dict:
    """A message's properties as a pull returns them: what the broker adds to every stored
    message (CLUSTER) and what the client adds on each pull (MIN_OFFSET, MAX_OFFSET)."""
    return {"CLUSTER": "DefaultCluster", "MIN_OFFSET": ANY, "MAX_OFFSET": ANY, "UNIQ_KEY": ANY, **kw}


_RETRY = dict(RETRY_TOPIC="MatrixRetry", ORIGIN_MESSAGE_ID=ANY, REAL_TOPIC="%RETRY%matrix_retry", REAL_QID="0",
              WAIT="false")
_HALF = dict(PGROUP="matrix_tx", REAL_TOPIC="MatrixTx", REAL_QID="0", TRAN_MSG="true", WAIT="true")

EXPECTED = {
    # the first send creates the topic (4 queues, as the producer asks); WAIT goes, CLUSTER comes
    "sync_send": {
        "statuses": ["SEND_OK"] * 8, "publish_queues": 4, "queues_used": 4, "offsets_consecutive": True,
        "read_back": [{"body": f"sync-{i}", "properties": _props(KEYS=f"key-{i}", TAGS="TagS",
                                                                color="red" if i % 2 == 0 else "blue")}
                      for i in range(8)]},
    "async_send": {"all_called_back": True, "statuses": ["SEND_OK"] * 8, "failures": [],
                   "bodies": [f"async-{i}" for i in range(8)], "offsets_consecutive": True},
    "oneway_send": {"bodies": [f"oneway-{i}" for i in range(8)], "offsets_consecutive": True},
    # one queue, consecutive offsets, the returned ids are the messages' unique keys
    "batch_send": {
        "status": "SEND_OK", "first_offset": 0, "ids_returned": 5, "ids_are_the_uniq_keys": True, "one_queue": True,
        "bodies_in_queue_order": [f"batch-{i}" for i in range(5)], "offsets_consecutive": True,
        "properties": [_props(KEYS=f"bk-{i}", WAIT="true") for i in range(5)]},
    # level 3: not there at once, there a second later in its own topic and queue, DELAY kept
    "delay_level": {
        "status": "SEND_OK", "visible_at_once": False, "delivered": 1, "after_its_delay": True, "body": "delayed",
        "topic": "MatrixDelay",
        "properties": _props(DELAY="3", REAL_TOPIC="MatrixDelay", REAL_QID="0", WAIT="true")},
    # two consumers of one group: two queues each, every message once, offsets committed
    "push_clustering": {"balanced_two_queues_each": True, "consumed": 20, "distinct": 20, "per_consumer": [10, 10],
                        "progress": {"consumed_offsets": 20, "diff": 0}},
    # RECONSUME_LATER with maxReconsumeTimes 2: three deliveries (levels 3 and 4), then %DLQ%
    "retry_dlq": {
        "deliveries": [
            {"topic": "MatrixRetry", "body": "retry-me", "reconsumeTimes": 0,
             "properties": _props(CONSUME_START_TIME=ANY)},
            {"topic": "MatrixRetry", "body": "retry-me", "reconsumeTimes": 1,
             "properties": _props(CONSUME_START_TIME=ANY, DELAY="3", **_RETRY)},
            {"topic": "MatrixRetry", "body": "retry-me", "reconsumeTimes": 2,
             "properties": _props(CONSUME_START_TIME=ANY, DELAY="4", **_RETRY)}],
        "dlq": [{"topic": "%DLQ%matrix_retry", "body": "retry-me", "reconsumeTimes": 3,
                 "properties": _props(DELAY="0", **_RETRY)}]},
    "orderly": {"steps": {o: list(range(6)) for o in "012"}, "queues": {o: [int(o)] for o in "012"},
                "progress": {"consumed_offsets": 18, "diff": 0}},
    # the rolled-back one never shows; the unknown one is checked once and committed
    "transaction": {
        "sent": {"tx-commit": "SEND_OK/COMMIT_MESSAGE", "tx-rollback": "SEND_OK/ROLLBACK_MESSAGE",
                 "tx-unknown": "SEND_OK/UNKNOW"},
        "checked": ["tx-unknown"],
        "consumed": {"tx-commit": {"properties": _props(**_HALF)},
                     "tx-unknown": {"properties": _props(TRANSACTION_CHECK_TIMES=ANY, **_HALF)}}},
    "lite_pull": {"assigned": 4, "bodies": sorted(f"lite-{i}" for i in range(12)), "offsets_consecutive": True,
                  "progress": {"consumed_offsets": 12, "diff": 0}},
    # a queue of 10: pulls from 0, 4, the end and past it; a held pull woken by a send; the
    # group's offset as stored on the broker (a new group reads 0 while the queue is in memory)
    "pull_offsets": {
        "queues": 2, "fresh_group_offset": 0, "min": 0, "max": 10,
        "pulls": [{"from": 0, "status": "FOUND", "next": 4, "bodies": [f"pull-{i}" for i in range(4)]},
                  {"from": 4, "status": "FOUND", "next": 10, "bodies": [f"pull-{i}" for i in range(4, 10)]},
                  {"from": 10, "status": "NO_NEW_MSG", "next": 10, "bodies": []},
                  {"from": 15, "status": "OFFSET_ILLEGAL", "next": 10, "bodies": []}],
        "long_poll": "FOUND:[woken]", "stored_offset": 7, "offset_seen_by_another_instance": 7},
}


def without_record_crc(x):
    """``x`` without pymq's ``__CRC32#`` properties: each pymq record ends with its own CRC
    (RocketMQ 5's enabledAppendPropCRC, on by default in pymq, see ``StoreConfig.
    enabled_append_prop_crc``), which a 4.x client pulling raw records sees as a property."""
    if isinstance(x, dict):
        return {k: without_record_crc(v) for k, v in x.items() if k != "__CRC32#"}
    if isinstance(x, list):
        return [without_record_crc(v) for v in x]
    return x


@pytest.fixture(scope="session")
def feature_matrix(rocketmq_home, tmp_path_factory):
    """tests/java/FeatureMatrix.java (with ConsumerFeatures.java), compiled once per session."""
    from real_rocketmq import REPO, JavaProgram
    java = REPO / "tests" / "java"
    return JavaProgram.compile(rocketmq_home, tmp_path_factory.mktemp("feature-matrix"), java / "FeatureMatrix.java",
                               java / "ConsumerFeatures.java")


@pytest.fixture(scope="module")
def matrix(feature_matrix, counterpart) -> dict:
    """{feature: outcome} of one FeatureMatrix run against the counterpart."""
    p = feature_matrix.run(counterpart.run_dir / "feature-matrix", counterpart.namesrv, counterpart.address,
                           timeout=240)
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith("FEATURE "):
            r = json.loads(line[len("FEATURE "):])
            out[r.pop("feature")] = r
    assert p.returncode == 0 and set(out) == set(EXPECTED), \
        f"FeatureMatrix exited {p.returncode}:\n{p.stdout[-4000:]}\n--- server ---\n{counterpart.log_tail()}"
    return out


@pytest.mark.parametrize("feature", list(EXPECTED))
def test_java_client_feature(matrix, feature):
    got = matrix[feature]
    assert "error" not in got, got["error"]
    assert without_record_crc(got) == EXPECTED[feature]
