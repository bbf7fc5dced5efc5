"""RocketMQ 4.x request and response codes (``RequestCode``, ``ResponseCode``), as served here."""

from __future__ import annotations


class RequestCode:
    """The request codes pymq answers (RocketMQ's numbering)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_NAME_LIST = 23
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    GET_KV_CONFIG = 101
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    QUERY_DATA_VERSION = 322
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    DELETE_EXPIRED_COMMITLOG = 329


class ResponseCode:
    """RocketMQ's response codes."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    CONSUMER_NOT_ONLINE = 206


class PullSysFlag:
    """Bits of a pull request's ``sysFlag``."""

    COMMIT_OFFSET = 1
    SUSPEND = 2
    SUBSCRIPTION = 4
    CLASS_FILTER = 8


def code_name(table: type, code: int) -> str:
    """The name of ``code`` in ``table`` (RequestCode, ResponseCode), or its number."""
    names = _NAMES.get(table)
    if names is None:
        names = _NAMES[table] = {v: k for k, v in vars(table).items() if k.isupper() and isinstance(v, int)}
    return names.get(code, str(code))


_NAMES: dict = {}


#: every request code RocketMQ 4.9.7's name server serves (its ``DefaultRequestProcessor``:
#: KV config, broker registration and permissions, routes, topic lists, unit topics, its own
#: config); a request with any other code gets no response at all from it (the processor
#: returns null), and the client waits for its timeout
NAMESRV_REQUEST_CODES = frozenset({
    100, 101, 102,                  # PUT_KV_CONFIG, GET_KV_CONFIG, DELETE_KV_CONFIG
    103, 104, 322,                  # REGISTER_BROKER, UNREGISTER_BROKER, QUERY_DATA_VERSION
    105, 106,                       # GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO
    205, 327,                       # WIPE_WRITE_PERM_OF_BROKER, ADD_WRITE_PERM_OF_BROKER
    206, 216, 219, 224, 304,        # topic lists, DELETE_TOPIC_IN_NAMESRV, GET_KVLIST_BY_NAMESPACE
    311, 312, 313,                  # GET_UNIT_TOPIC_LIST, GET_HAS_UNIT_SUB_(UNUNIT_)TOPIC_LIST
    318, 319,                       # UPDATE_NAMESRV_CONFIG, GET_NAMESRV_CONFIG
})


def not_supported(conn, cmd):
    """The answer to a request code nobody here serves: ``REQUEST_CODE_NOT_SUPPORTED`` with
    RocketMQ's remark, its leading space included (``NettyRemotingAbstract``)."""
    return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
