"""RocketMQ's on-disk layouts: the Python source of truth for sizes, offsets and magic codes.

CommitLog record, message format v1 (big-endian; offsets for an IPv4 born host and an
IPv4 store host; a v6 address grows from 8 to 20 bytes and shifts every later field)::

     0 +-----------------+----------------+-----------------+----------------+
       | TOTALSIZE   i32 | MAGICCODE  i32 | BODYCRC     i32 | QUEUEID    i32 |
    16 +-----------------+----------------+-----------------+----------------+
       | FLAG        i32 | QUEUEOFFSET                 i64 | PHYSICALOFFSET  |
    32 +-----------------+---------------------------------+----------------+
       |  ...phys    i64 | SYSFLAG    i32 | BORNTIMESTAMP               i64 |
    48 +-----------------+----------------+---------------------------------+
       | BORNHOST  ip(4|16) + port i32    | STORETIMESTAMP              i64 |
    64 +----------------------------------+---------------------------------+
       | STOREHOST ip(4|16) + port i32    | RECONSUMETIMES i32 | PREPARED  |
    80 +----------------------------------+--------------------+ TX OFFSET |
       |   ...i64       | BODYLENGTH i32 | BODY (n bytes) ...              |
    88 +----------------+----------------+---------------------------------+
       | TOPICLENGTH i8 | TOPIC ... | PROPERTIESLENGTH i16 | PROPERTIES ... |
       +----------------+-----------+----------------------+---------------+

End of a segment: when a record does not fit with 8 bytes to spare, an 8-byte blank
``[i32 bytes-left-in-file][i32 BLANK_MAGIC_CODE]`` closes the file.

ConsumeQueue entry (20 bytes)::

    +--------------------------+---------------+--------------------------+
    | commitlog offset     i64 | size      i32 | tagsCode             i64 |
    +--------------------------+---------------+--------------------------+
"""

MESSAGE_MAGIC_CODE = -626843481          # 0xDAA320A7, message format v1
MESSAGE_MAGIC_CODE_V2 = -626843477       # 0xDAA320AB, RocketMQ 5.x 2-byte topic length
BLANK_MAGIC_CODE = -875286124            # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

# field positions in a record
TOTALSIZE_POSITION = 0
MAGIC_CODE_POSITION = 4
BODYCRC_POSITION = 8
QUEUEID_POSITION = 12
FLAG_POSITION = 16
QUEUE_OFFSET_POSITION = 20
PHYSICAL_OFFSET_POSITION = 28
SYSFLAG_POSITION = 36
BORN_TIMESTAMP_POSITION = 40
BORN_HOST_POSITION = 48

IPV4_HOST_LENGTH = 8                     # 4 address bytes + i32 port
IPV6_HOST_LENGTH = 20                    # 16 address bytes + i32 port
RECORD_FIXED_OVERHEAD_V4 = 91            # calMsgLength with empty body/topic/properties

# sysflag bits (MessageSysFlag)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20

# limits
MAX_TOPIC_LENGTH = 127                   # TopicValidator.TOPIC_MAX_LENGTH and the i8 length
MAX_PROPERTIES_LENGTH = 32767            # Short.MAX_VALUE
MAX_RECORD_OVER_BODY = 64 * 1024         # record may exceed max body by this much (4.9.4+)

# properties string
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# consume queue
CQ_STORE_UNIT_SIZE = 20

# index file
INDEX_HEADER_SIZE = 40
INDEX_HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20

OS_PAGE_SIZE = 4096
FILE_NAME_DIGITS = 20


def cal_msg_length(sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """``CommitLog.calMsgLength``: the size of a v1 record with these field lengths."""
    born = IPV6_HOST_LENGTH if sys_flag & BORNHOST_V6_FLAG else IPV4_HOST_LENGTH
    store = IPV6_HOST_LENGTH if sys_flag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_LENGTH
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
            + 4 + max(body_len, 0) + 1 + topic_len + 2 + max(props_len, 0))
