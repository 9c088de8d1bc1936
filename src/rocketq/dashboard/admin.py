"""DashboardAdmin: :class:`~rocketq.client.AsyncAdmin` plus the broker requests the console needs
that the admin client does not wrap: runtime info (28), the consumer connections of a group (203),
the offset of a queue at a time (29) and CONSUME_MESSAGE_DIRECTLY (309)."""

from __future__ import annotations

import json
from typing import Any

from rocketq.client.admin import AsyncAdmin
from rocketq.client.admin_views import MessageView, _int
from rocketq.errors import BodyFormatError, ResponseCode
from rocketq.remoting import RequestCode

#: the broker's answer to a group without online consumers (CONSUMER_NOT_ONLINE)
_CONSUMER_NOT_ONLINE = 206
_NOT_SUPPORTED = int(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)


class DashboardAdmin(AsyncAdmin):
    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """The broker's GET_BROKER_RUNTIME_INFO key/value table."""
        response = await self._broker(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        try:
            table = json.loads(response.body or b"{}").get("table")
        except (ValueError, AttributeError) as exc:
            raise BodyFormatError(f"runtime info of {addr} does not parse: {exc}") from None
        return {str(k): str(v) for k, v in (table or {}).items()}

    async def consumer_connections(self, addr: str, group: str) -> dict[str, Any]:
        """The online members of ``group`` on one broker (empty ``connectionSet`` when none)."""
        response = await self._broker(
            addr,
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            {"consumerGroup": group},
            ok=(0, _CONSUMER_NOT_ONLINE),
        )
        if response.code != 0:
            return {"connectionSet": [], "subscriptionTable": {}}
        try:
            doc = json.loads(response.body or b"{}")
        except ValueError as exc:
            raise BodyFormatError(f"consumer connections of {group!r} from {addr}: {exc}") from None
        return doc if isinstance(doc, dict) else {"connectionSet": []}

    async def search_offset(self, addr: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of a queue stored at or after ``timestamp_ms``."""
        fields: dict[str, object] = {"topic": topic, "queueId": queue_id, "timestamp": timestamp_ms}
        response = await self._broker(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields)
        return _int(response.ext_fields.get("offset"))

    async def consume_directly(
        self, addr: str, group: str, client_id: str, msg_id: str, topic: str
    ) -> str | None:
        """Ask a member of ``group`` (through the broker) to consume message ``msg_id`` again;
        the member's answer as text, or None when the broker does not relay the request."""
        fields: dict[str, object] = {
            "consumerGroup": group,
            "clientId": client_id,
            "msgId": msg_id,
            "topic": topic,
        }
        response = await self._broker(
            addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, fields, ok=(0, _NOT_SUPPORTED)
        )
        if response.code == _NOT_SUPPORTED:
            return None
        return (response.body or b"").decode("utf-8", "replace")

    async def pull_range(
        self, topic: str, broker_name: str, queue_id: int, offset: int, count: int
    ) -> list[MessageView]:
        """Up to ``count`` messages of one queue from ``offset`` on (pulls, no commit)."""
        return await self.consume_message(topic, queue_id, offset, count, broker_name=broker_name)

    async def broker_addr_of(self, topic: str, broker_name: str) -> str:
        return await self._broker_addr(topic, broker_name)

    async def masters(self) -> dict[str, str]:
        return await self._masters(None)
