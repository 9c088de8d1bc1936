"""Registration with the name servers: REGISTER_BROKER (103) and UNREGISTER_BROKER (104).

A broker registers with every name server in ``namesrv_addr`` at start, every
``register_broker_interval_ms`` (30 s) after that, and soon after any topic change; it
unregisters at shutdown. A name server drops a broker it has not heard from for 120 s.

REGISTER_BROKER::

    extFields  brokerName, brokerAddr (ip1:port), clusterName, haServerAddr, brokerId,
               enableActingMaster=false, compressed=false, bodyCrc32 = crc32(body) & 0x7FFFFFFF
    body       RegisterBrokerBody JSON:
               {"filterServerList":[],
                "topicConfigSerializeWrapper":{"dataVersion":{...},"topicConfigTable":{...},
                                               "mappingDataVersion":{...},
                                               "topicQueueMappingDetailMap":{},
                                               "topicQueueMappingInfoMap":{}}}

Each name server is called independently with ``register_broker_timeout_mills``; a failure is
logged and retried at the next round. Requests for a registration while one runs are coalesced
into one more round.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Callable
from typing import Any

from rocketq.broker.config import BrokerConfig
from rocketq.errors import ResponseCode, RocketqError
from rocketq.protocol.route import DLEDGER_TERM_FIELD
from rocketq.remoting.client import RemotingClient
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import create_request

log = logging.getLogger(__name__)


def register_broker_body(topic_wrapper: dict[str, Any]) -> bytes:
    """The RegisterBrokerBody JSON for a ``TopicConfigSerializeWrapper`` (standard JSON)."""
    wrapper = dict(topic_wrapper)
    wrapper.setdefault("mappingDataVersion", wrapper.get("dataVersion", {}))
    wrapper.setdefault("topicQueueMappingDetailMap", {})
    wrapper.setdefault("topicQueueMappingInfoMap", {})
    body = {"filterServerList": [], "topicConfigSerializeWrapper": wrapper}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def body_crc32(body: bytes) -> int:
    """``UtilAll.crc32``: CRC32 masked to a non-negative int."""
    return zlib.crc32(body) & 0x7FFFFFFF


def register_broker_fields(
    cfg: BrokerConfig, broker_addr: str, body: bytes, dledger_term: int | None = None
) -> dict[str, str]:
    fields = {
        "brokerName": cfg.broker_name,
        "brokerAddr": broker_addr,
        "clusterName": cfg.broker_cluster_name,
        "haServerAddr": cfg.ha_server_addr,
        "brokerId": str(cfg.broker_id),
        "enableActingMaster": "false",
        "compressed": "false",
        "bodyCrc32": str(body_crc32(body)),
    }
    if dledger_term is not None:
        fields[DLEDGER_TERM_FIELD] = str(dledger_term)
    return fields


class NameServerRegistrar:
    """Keeps this broker registered with every configured name server."""

    def __init__(
        self,
        cfg: BrokerConfig,
        client: RemotingClient,
        broker_addr: Callable[[], str],
        topic_wrapper: Callable[[], dict[str, Any]],
    ) -> None:
        self.cfg = cfg
        self.client = client
        self._broker_addr = broker_addr
        self._topic_wrapper = topic_wrapper
        self._pending = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.last_results: dict[str, str] = {}
        #: the DLedger term this broker registers in (set on each role change in DLedger mode)
        self.dledger_term: int | None = None

    @property
    def addresses(self) -> list[str]:
        return self.cfg.namesrv_addrs

    async def _register_one(self, addr: str, body: bytes) -> str:
        fields = register_broker_fields(self.cfg, self._broker_addr(), body, self.dledger_term)
        request = create_request(RequestCode.REGISTER_BROKER, fields, body)
        timeout = self.cfg.register_broker_timeout_mills / 1000
        try:
            response = await self.client.invoke(addr, request, timeout)
        except (RocketqError, OSError) as exc:
            log.warning("registering with name server %s failed: %s", addr, exc)
            return f"error: {exc}"
        if response.code != ResponseCode.SUCCESS:
            log.warning(
                "name server %s refused the registration: code %d %s", addr, response.code, response.remark
            )
            return f"code {response.code}: {response.remark}"
        return "ok"

    async def register_all(self) -> dict[str, str]:
        """Register with every name server now; returns ``addr → "ok" | reason``."""
        addrs = self.addresses
        if not addrs:
            return {}
        body = register_broker_body(self._topic_wrapper())
        results = await asyncio.gather(*(self._register_one(a, body) for a in addrs))
        self.rounds += 1
        self.last_results = dict(zip(addrs, results, strict=True))
        return self.last_results

    def request(self) -> None:
        """Register soon (after a topic change); coalesces while a round is running."""
        if not self.addresses or self._closed:
            return
        self._pending = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._pending:
            self._pending = False
            await self.register_all()

    async def wait_idle(self) -> None:
        task = self._task
        if task is not None and not task.done():
            await asyncio.shield(task)

    async def unregister_all(self, max_timeout_s: float | None = None) -> None:
        """Stop registering and unregister from every name server (all at once), each call
        bounded by ``register_broker_timeout_mills`` and ``max_timeout_s`` when given (a
        shutdown does not wait long for a name server that does not answer)."""
        self._closed = True
        addrs = self.addresses
        if not addrs:
            return
        task = self._task
        if task is not None and not task.done():
            task.cancel()
        fields = {
            "brokerName": self.cfg.broker_name,
            "brokerAddr": self._broker_addr(),
            "clusterName": self.cfg.broker_cluster_name,
            "brokerId": str(self.cfg.broker_id),
        }
        timeout = self.cfg.register_broker_timeout_mills / 1000
        if max_timeout_s is not None:
            timeout = min(timeout, max_timeout_s)

        async def one(addr: str) -> None:
            try:
                response = await self.client.invoke(
                    addr, create_request(RequestCode.UNREGISTER_BROKER, fields), timeout
                )
                if response.code != ResponseCode.SUCCESS:
                    log.warning("name server %s refused the unregistration: %s", addr, response.remark)
            except (RocketqError, OSError) as exc:
                log.warning("unregistering from name server %s failed: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in addrs))


__all__ = ["NameServerRegistrar", "body_crc32", "register_broker_body", "register_broker_fields"]
