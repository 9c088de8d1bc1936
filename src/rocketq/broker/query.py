"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33): messages by key and by commit-log offset.

QUERY_MESSAGE ``{topic, key, maxNum, beginTimestamp, endTimestamp}`` looks ``key`` up in the index
(each KEYS token and the UNIQ_KEY are indexed); with extField ``_UNIQUE_KEY_QUERY=true`` (a query
by unique key) ``maxNum`` is the store's ``default_query_max_num``. The answer's body is the
stored records concatenated, oldest first; headers ``indexLastUpdateTimestamp`` and
``indexLastUpdatePhyoffset`` are always set; no match → 22 QUERY_NOT_FOUND.

VIEW_MESSAGE_BY_ID ``{offset}`` (the commit-log offset inside an offset msgId) answers the one
stored record starting there, or 1 SYSTEM_ERROR when there is none.

Both read the CommitLog in a worker thread.
"""

from __future__ import annotations

from rocketq.broker.context import BrokerContext
from rocketq.errors import ResponseCode, RocketqError
from rocketq.protocol.headers import get_bool, get_int, get_long, get_str
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import Connection
from rocketq.store.message_store import MessageStore

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


def query_records(
    store: MessageStore, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
) -> tuple[list[bytes], int, int]:
    """(raw records, index last update timestamp, index last update physical offset)."""
    result = store.query_messages_by_key(topic, key, max_num, begin_ms, end_ms)
    records = []
    for m in result.messages:
        raw = store.select_one_message_by_offset(m.commit_log_offset, m.store_size)
        if raw is not None:
            records.append(raw)
    return records, result.index_last_update_timestamp, result.index_last_update_phy_offset


class QueryMessageProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    async def query_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        topic = get_str(ext, "topic")
        key = get_str(ext, "key")
        max_num = get_int(ext, "maxNum", self.ctx.store.config.default_query_max_num)
        begin = get_long(ext, "beginTimestamp", 0)
        end = get_long(ext, "endTimestamp", (1 << 63) - 1)
        if get_bool(ext, UNIQUE_KEY_QUERY):
            max_num = self.ctx.store.config.default_query_max_num
        records, last_ts, last_phy = await self.ctx.blocking(
            query_records, self.ctx.store, topic, key, max_num, begin, end
        )
        fields = {"indexLastUpdateTimestamp": str(last_ts), "indexLastUpdatePhyoffset": str(last_phy)}
        if not records:
            return create_response(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                f"can not find message by key {key!r} in topic {topic}, maybe time range not correct",
                ext_fields=fields,
            )
        return create_response(request, ResponseCode.SUCCESS, ext_fields=fields, body=b"".join(records))

    async def view_message_by_id(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        offset = get_long(request.ext_fields, "offset")
        raw = await self.ctx.blocking(self.ctx.store.select_one_message_by_offset, offset)
        if raw is None:
            raise RocketqError(f"can not find message by the offset, {offset}")
        return create_response(request, ResponseCode.SUCCESS, body=raw)


__all__ = ["UNIQUE_KEY_QUERY", "QueryMessageProcessor", "query_records"]
