"""The admin's message operations: find stored messages, read a queue, send one message.

Messages are found by offset message id (VIEW_MESSAGE_BY_ID 33 to the broker the id names), by
key (QUERY_MESSAGE 12 on every master of the topic, oldest first) and by queue offset (one
PULL_MESSAGE 11 as group ``TOOLS_CONSUMER``, no commit); ``consume_message`` pulls one queue in
batches of at most 32. ``send_message`` sends through a producer of group ``TOOLS_PRODUCER``,
created on first use and shut down with the admin. Found messages are
:class:`~rocketq.client.admin_views.MessageView` objects (a poison one keeps its stored body).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rocketq.client.admin_requests import AdminRequests
from rocketq.client.admin_views import MessageView, _int, decode_messages
from rocketq.client.aio import AsyncProducer, SendResult, error_for_response
from rocketq.errors import InvalidParameter, MessageNotFound, ResponseCode, TopicNotExist
from rocketq.message import Message, decode_offset_msg_id
from rocketq.protocol.headers import PULL_FLAG_SUBSCRIPTION, PullMessageRequestHeader
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting import RequestCode, create_request

if TYPE_CHECKING:
    from rocketq.client.admin import AsyncAdmin
    from rocketq.client.trace import TraceEvent

#: The group admin pulls use (Java ``MixAll.TOOLS_CONSUMER_GROUP``).
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: The group admin sends use.
TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"
_MAX_PULL_BATCH = 32
_LONG_MAX = (1 << 63) - 1


class AdminMessages(AdminRequests):
    """The message operations of :class:`~rocketq.client.admin.AsyncAdmin`."""

    async def query_msg_by_id(self, msg_id: str) -> MessageView:
        """The message with offset message id ``msg_id`` (store host:port + commit-log offset)."""
        try:
            parsed = decode_offset_msg_id(msg_id.strip())
        except ValueError as exc:
            raise InvalidParameter(f"{exc} (an offset message id is expected)") from None
        response = await self._client().invoke(
            parsed.address,
            create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": parsed.offset}),
            self.timeout_s,
        )
        if response.code != ResponseCode.SUCCESS:
            raise MessageNotFound(
                f"broker {parsed.address} has no message at commit-log offset {parsed.offset} "
                f"(id {msg_id}): {response.remark or f'code {response.code}'}"
            )
        found = decode_messages(response.body, f"message {msg_id} from {parsed.address}")
        if not found:
            raise MessageNotFound(f"broker {parsed.address} returned no message for id {msg_id}")
        return found[0]

    async def query_msg_by_key(self, topic: str, key: str, max_num: int = 32) -> list[MessageView]:
        """Messages of ``topic`` whose KEYS (or UNIQ_KEY) contain ``key``, from every broker of
        the topic, oldest first, at most ``max_num``; empty when there is none."""
        if max_num <= 0:
            raise InvalidParameter(f"max_num={max_num} must be > 0")
        fields: dict[str, object] = {
            "topic": topic,
            "key": key,
            "maxNum": max_num,
            "beginTimestamp": 0,
            "endTimestamp": _LONG_MAX,
        }
        found: list[MessageView] = []
        for addr in (await self._topic_masters(topic)).values():
            response = await self._broker(
                addr, RequestCode.QUERY_MESSAGE, fields, ok=(0, ResponseCode.QUERY_NOT_FOUND)
            )
            if response.code != ResponseCode.SUCCESS:
                continue
            for m in decode_messages(response.body, f"query of key {key!r} on {addr}"):
                if m.topic == topic and (key in m.keys or m.uniq_key == key):
                    found.append(m)
        found.sort(key=lambda m: (m.store_timestamp, m.store_host, m.commit_log_offset))
        return found[:max_num]

    async def _pull(
        self, addr: str, topic: str, queue_id: int, offset: int, max_nums: int
    ) -> tuple[int, list[MessageView], str]:
        header = PullMessageRequestHeader(
            consumer_group=TOOLS_CONSUMER_GROUP,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_millis=0,
            sub_version=0,
            subscription="*",
        )
        ok = (
            0,
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_RETRY_IMMEDIATELY,
            ResponseCode.PULL_OFFSET_MOVED,
        )
        response = await self._client().invoke(
            addr, create_request(RequestCode.PULL_MESSAGE, header.to_ext_fields()), self.timeout_s
        )
        if response.code not in ok:
            raise error_for_response(response, addr)
        if response.code != ResponseCode.SUCCESS:
            return -1, [], response.remark or f"code {response.code}"
        messages = decode_messages(response.body, f"pull of {topic}/{queue_id} at {offset} from {addr}")
        return _int(response.ext_fields.get("nextBeginOffset"), offset + len(messages)), messages, ""

    async def query_msg_by_offset(
        self, topic: str, broker_name: str, queue_id: int, offset: int
    ) -> MessageView:
        """The message at logical ``offset`` of one queue (one PULL_MESSAGE)."""
        addr = await self._broker_addr(topic, broker_name)
        _, messages, why = await self._pull(addr, topic, queue_id, offset, 1)
        if not messages or messages[0].queue_offset != offset:
            raise MessageNotFound(
                f"no message at offset {offset} of {topic}/{broker_name}/{queue_id}: {why or 'not found'}"
            )
        return messages[0]

    async def consume_message(
        self,
        topic: str,
        queue: MessageQueue | int,
        offset: int = 0,
        count: int = 32,
        *,
        broker_name: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[MessageView]:
        """Up to ``count`` messages of one queue from logical ``offset`` on (pulls, no commit).

        ``queue`` is a :class:`MessageQueue` or a queue id on ``broker_name`` (default: the
        first broker of the topic's route); ``progress(read, count)`` is called after each pull."""
        if count <= 0:
            raise InvalidParameter(f"count={count} must be > 0")
        if isinstance(queue, MessageQueue):
            topic, broker_name, queue_id = queue.topic, queue.broker_name, queue.queue_id
        else:
            queue_id = queue
        masters = await self._topic_masters(topic)
        if broker_name is None:
            broker_name = next(iter(masters))
        addr = masters.get(broker_name)
        if addr is None:
            raise TopicNotExist(f"topic {topic!r} is not served by broker {broker_name!r}")
        out: list[MessageView] = []
        while len(out) < count:
            next_offset, messages, _ = await self._pull(
                addr, topic, queue_id, offset, min(_MAX_PULL_BATCH, count - len(out))
            )
            if not messages:
                break
            out.extend(messages)
            if progress is not None:
                progress(min(len(out), count), count)
            if next_offset <= offset:
                break
            offset = next_offset
        return out[:count]

    async def query_msg_trace_by_id(
        self, msg_id: str, trace_topic: str = "RMQ_SYS_TRACE_TOPIC", max_num: int = 64
    ) -> list[TraceEvent]:
        """The trace of a message, oldest event first (``rocketq.client.trace``)."""
        from rocketq.client.trace import query_msg_trace_by_id  # noqa: PLC0415 - loaded on use

        admin: AsyncAdmin = self  # type: ignore[assignment]  # a mixin of AsyncAdmin
        return await query_msg_trace_by_id(admin, msg_id, trace_topic, max_num)

    async def send_message(
        self, topic: str, body: bytes | str, tags: str | None = None, keys: str | Sequence[str] | None = None
    ) -> SendResult:
        """Send one message through a producer of group ``TOOLS_PRODUCER``."""
        self._client()
        if self._producer is None:
            producer = AsyncProducer(
                TOOLS_PRODUCER_GROUP,
                config=self.config,
                namesrv_addr=self.namesrv_addrs,
                send_timeout_ms=int(self.timeout_s * 1000),
            )
            await producer.start()
            self._producer = producer
        key_list = keys.split() if isinstance(keys, str) else list(keys or ())
        data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        return await self._producer.send(Message(topic, data, tags=tags, keys=key_list))
