"""Numbers of the RocketMQ remoting protocol: request codes, language codes, flag bits, limits.

Everything here is a constant taken from Apache RocketMQ's ``RequestCode``, ``LanguageCode``,
``SerializeType``, ``RemotingCommand`` and ``MQVersion`` (spec/remoting.md §1–§2). Response codes
live in :class:`rocketq.errors.ResponseCode`, next to the errors that carry them.

Flag word of a command (``flag``)::

    bit   name         meaning
    0     RPC_TYPE     1 = response, 0 = request
    1     RPC_ONEWAY   1 = oneway request: the receiver sends no response

Request codes are shared by both directions of a connection: clients send most of them to the
name server and brokers; brokers send the few in "broker → client" to clients on the same socket.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class RequestCode(IntEnum):
    """Request codes (``RequestCode.java``), grouped as in spec/remoting.md §2.2–§2.4."""

    # Name server (§2.2).
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    DELETE_EXPIRED_COMMITLOG = 329
    BROKER_HEARTBEAT = 904

    # Broker, client-facing (§2.3).
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    UPDATE_AND_CREATE_TOPIC_LIST = 18
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
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
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    DELETE_TOPIC_IN_BROKER = 215
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    CLONE_GROUP_OFFSET = 314
    SEND_BATCH_MESSAGE = 320
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    LITE_PULL_MESSAGE = 361
    QUERY_ASSIGNMENT = 400
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    BATCH_ACK_MESSAGE = 200151

    # Broker → client (§2.4); GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309)
    # above travel both ways.
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326


class LanguageCode(IntEnum):
    """``LanguageCode.java``: JSON headers carry the name, ROCKETMQ headers the byte."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class SerializeType(IntEnum):
    """Header encoding, the high byte of the frame's second int32 (``SerializeType.java``)."""

    JSON = 0
    ROCKETMQ = 1


class Version(IntEnum):
    """``MQVersion.Version`` ordinals that matter to peers (a header's ``version`` field)."""

    V3_4_9 = 117  # honours maxReconsumeTimes in send/send-back headers from here on
    V3_5_2 = 121  # what ali-ons sends
    V4_0_0 = 209
    V4_1_0_SNAPSHOT = 228  # Java clients refuse SQL92 pulls to brokers older than this
    V4_9_4 = 397  # name server answers standard JSON route data from here on
    V4_9_8 = 405
    V5_0_0 = 409
    V5_3_3 = 475


# Flag bits (bit numbers as in Java's RemotingCommand, and the masks built from them).
RPC_TYPE: Final = 0
RPC_ONEWAY: Final = 1
FLAG_RESPONSE: Final = 1 << RPC_TYPE
FLAG_ONEWAY: Final = 1 << RPC_ONEWAY

#: The version ordinal rocketq puts into every header it sends.
CURRENT_VERSION: Final = int(Version.V5_3_3)

#: The language rocketq announces. JAVA, as ali-ons does: peers treat it as the common case.
DEFAULT_LANGUAGE: Final = LanguageCode.JAVA

#: Largest whole frame (length field included) a receiver accepts: Java's
#: ``com.rocketmq.remoting.frameMaxLength`` default, in bytes.
DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024

#: The header length is the low 24 bits of the frame's second int32.
MAX_HEADER_LENGTH: Final = 0xFFFFFF

#: Remark of the answer to an unknown request code (note the leading space, as Java writes it).
REQUEST_CODE_NOT_SUPPORTED_REMARK: Final = " request type {code} not supported"
