"""How the admin reaches a cluster: its lifecycle, requests to name servers and brokers, routes.

:class:`AdminRequests` is the base of :class:`~rocketq.client.admin.AsyncAdmin`. It owns one
:class:`~rocketq.remoting.RemotingClient` between :meth:`~AdminRequests.start` and
:meth:`~AdminRequests.shutdown`; name servers are asked in turn and the first answer wins
(:class:`~rocketq.errors.NameServerUnavailable` names every address that failed), a broker's
answer other than the expected codes becomes the matching :class:`~rocketq.errors.RocketqError`.
The name server views (routes 105, topic list 206, cluster info 106) and the lookups built on
them (the masters of a cluster or a topic, a broker's address) live here, since every admin
operation starts from them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Self

from rocketq.client.admin_views import BrokerEntry
from rocketq.client.aio import AsyncProducer, error_for_response
from rocketq.client.config import ClientConfig, resolve_config
from rocketq.errors import (
    BodyFormatError,
    ClientStateError,
    ConfigError,
    NameServerUnavailable,
    RemotingError,
    ResponseCode,
    RocketqError,
    TopicNotExist,
)
from rocketq.protocol import fastjson
from rocketq.protocol.route import MASTER_ID, ClusterInfo, TopicList, TopicRouteData
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request

DEFAULT_TIMEOUT_MS = 5_000
#: rocketq's request code for a DLedger leadership transfer (rocketq.broker.dledger_role)
DLEDGER_LEADERSHIP_TRANSFER = 9801


class AdminRequests:
    """The connection and the name server views of :class:`~rocketq.client.admin.AsyncAdmin`
    (whose constructor this is)."""

    def __init__(
        self,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        config: ClientConfig | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        if timeout_ms is None and config is None:
            timeout_ms = DEFAULT_TIMEOUT_MS
        if timeout_ms is not None and timeout_ms <= 0:
            raise ConfigError(f"invalid admin config: timeout_ms={timeout_ms} must be > 0")
        self.config = resolve_config(config, namesrv_addr=namesrv_addr, request_timeout_ms=timeout_ms)
        self.namesrv_addrs = self.config.namesrv_addrs()
        self.timeout_s = self.config.request_timeout_ms / 1000
        self._remoting: RemotingClient | None = None
        self._producer: AsyncProducer | None = None
        self._state = "created"

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._state == "running":
            return
        if self._state != "created":
            raise ClientStateError("admin was shut down and cannot be restarted")
        self._remoting = RemotingClient(rpc_hook=self.config.rpc_hook(), ssl=self.config.ssl_context())
        self._state = "running"

    async def shutdown(self) -> None:
        """Close the producer (if one was used) and every connection; idempotent."""
        running = self._state == "running"
        self._state = "shutdown"
        if not running:
            return
        if self._producer is not None:
            await self._producer.shutdown()
        if self._remoting is not None:
            await self._remoting.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _client(self) -> RemotingClient:
        if self._state != "running" or self._remoting is None:
            raise ClientStateError("admin is not started")
        return self._remoting

    # -- plumbing --------------------------------------------------------------------------------
    async def _namesrv(
        self, code: int, fields: dict[str, object] | None = None
    ) -> tuple[str, RemotingCommand]:
        """Ask the name servers in turn; the first answer (any code) wins."""
        client = self._client()
        errors: list[str] = []
        for addr in self.namesrv_addrs:
            try:
                return addr, await client.invoke(addr, create_request(code, fields), self.timeout_s)
            except RemotingError as exc:
                errors.append(f"{addr}: {exc}")
        raise NameServerUnavailable(f"no name server answered (request code {code}): " + "; ".join(errors))

    async def _broker(
        self, addr: str, code: int, fields: dict[str, object] | None = None, *, ok: Iterable[int] = (0,)
    ) -> RemotingCommand:
        response = await self._client().invoke(addr, create_request(code, fields), self.timeout_s)
        if response.code not in set(ok):
            raise error_for_response(response, addr)
        return response

    async def _broker_table(self, addr: str, code: int, key: str, what: str, missing: str) -> dict[Any, Any]:
        """The JSON object under ``key`` in the body of broker ``addr``'s answer to ``code``;
        BodyFormatError ("broker <addr>: <what> does not parse" or "broker <addr>: <missing>")
        when the body is not JSON or holds no object there."""
        response = await self._broker(addr, code)
        try:
            table = fastjson.loads((response.body or b"").decode("utf-8")).get(key)
        except (UnicodeDecodeError, ValueError, AttributeError) as exc:
            raise BodyFormatError(f"broker {addr}: {what} does not parse: {exc}") from None
        if not isinstance(table, dict):
            raise BodyFormatError(f"broker {addr}: {missing}")
        return table

    async def _masters(self, cluster: str | None) -> dict[str, str]:
        """Broker name → master address of every broker of ``cluster`` (all clusters if None)."""
        info = await self.cluster_info()
        if cluster is None:
            names: Iterable[str] = info.broker_addr_table
        elif cluster in info.cluster_addr_table:
            names = info.cluster_addr_table[cluster]
        else:
            known = ", ".join(sorted(info.cluster_addr_table)) or "none"
            raise ConfigError(f"cluster {cluster!r} is unknown to the name server (clusters: {known})")
        masters: dict[str, str] = {}
        for name in sorted(names):
            bd = info.broker_addr_table.get(name)
            addr = bd.broker_addrs.get(MASTER_ID) if bd is not None else None
            if addr:
                masters[name] = addr
        return masters

    async def _topic_masters(self, topic: str) -> dict[str, str]:
        route = await self.topic_route(topic)
        masters = {
            bd.broker_name: bd.broker_addrs[MASTER_ID]
            for bd in route.broker_datas
            if bd.broker_addrs.get(MASTER_ID)
        }
        if not masters:
            raise TopicNotExist(f"topic {topic!r} has no master broker in its route")
        return dict(sorted(masters.items()))

    async def _broker_addr(self, topic: str, broker_name: str) -> str:
        masters = await self._topic_masters(topic)
        addr = masters.get(broker_name)
        if addr is None:
            raise TopicNotExist(
                f"topic {topic!r} is not served by broker {broker_name!r} (brokers: {', '.join(masters)})"
            )
        return addr

    # -- name server views -----------------------------------------------------------------------
    async def topic_route(self, topic: str) -> TopicRouteData:
        """The topic's route; TopicNotExist when the name server does not know it."""
        addr, response = await self._namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotExist(f"topic {topic!r} has no route on name server {addr}")
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, f"name server {addr}")
        return TopicRouteData.decode(response.body)

    async def topic_list(self) -> list[str]:
        """Every topic the name server knows, sorted."""
        addr, response = await self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, f"name server {addr}")
        return sorted(TopicList.decode(response.body).topic_list)

    async def cluster_info(self) -> ClusterInfo:
        addr, response = await self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, f"name server {addr}")
        return ClusterInfo.decode(response.body)

    async def cluster_list(self) -> list[BrokerEntry]:
        """Every broker instance, sorted by cluster, broker name and broker id."""
        info = await self.cluster_info()
        entries: list[BrokerEntry] = []
        for cluster, names in info.cluster_addr_table.items():
            for name in names:
                bd = info.broker_addr_table.get(name)
                if bd is None:
                    continue
                for broker_id, addr in bd.broker_addrs.items():
                    entries.append(BrokerEntry(cluster, name, broker_id, addr))
        # every broker asked at once: one that does not answer costs one timeout, not one each
        roles = await asyncio.gather(*(self._dledger_role(e.addr) for e in entries))
        entries = [
            dataclasses.replace(e, dledger_role=r, dledger_term=t)
            for e, (r, t) in zip(entries, roles, strict=True)
        ]
        return sorted(entries, key=lambda e: (e.cluster, e.broker_name, e.broker_id))

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        """A broker's runtime figures (GET_BROKER_RUNTIME_INFO's ``table``), what mqadmin's
        ``brokerStatus`` prints."""
        table = await self._broker_table(
            broker_addr,
            RequestCode.GET_BROKER_RUNTIME_INFO,
            "table",
            "runtime info",
            "no table in the runtime info",
        )
        return {str(k): str(v) for k, v in table.items()}

    async def delete_expired_commitlog(
        self, *, broker_addr: str | None = None, cluster: str | None = None
    ) -> dict[str, str]:
        """mqadmin's ``deleteExpiredCommitLog``: one retention run now on ``broker_addr``, or on
        every broker of ``cluster`` (every member of a DLedger group, each by its own rule);
        returns each broker's remark."""
        if broker_addr is not None:
            addrs = [broker_addr]
        else:
            info = await self.cluster_info()
            clusters = [cluster] if cluster is not None else sorted(info.cluster_addr_table)
            names = [n for c in clusters for n in sorted(info.cluster_addr_table.get(c, ()))]
            addrs = [
                a for n in names if (bd := info.broker_addr_table.get(n)) for a in bd.broker_addrs.values()
            ]
            if not addrs:
                raise ConfigError(f"no broker to clean (clusters: {clusters})")
        out: dict[str, str] = {}
        for addr in addrs:
            response = await self._broker(addr, RequestCode.DELETE_EXPIRED_COMMITLOG, {})
            out[addr] = response.remark or "ok"
        return out

    async def _dledger_role(self, addr: str) -> tuple[str, str]:
        """Role and term of a broker in DLedger mode ("" for a plain or unreachable broker)."""
        try:
            info = await self.broker_runtime_info(addr)
        except (RemotingError, RocketqError, OSError, ValueError):
            return "", ""
        return info.get("dledgerRole", ""), info.get("dledgerTerm", "")

    async def dledger_leadership_transfer(self, broker_name: str, target: str) -> str:
        """Ask the leader (master) of DLedger group ``broker_name`` to hand leadership to the
        peer ``target`` (a ``dLegerSelfId``); returns the broker's remark. rocketq request 9801."""
        info = await self.cluster_info()
        bd = info.broker_addr_table.get(broker_name)
        addr = None if bd is None else bd.broker_addrs.get(MASTER_ID)
        if addr is None:
            raise ConfigError(f"broker {broker_name!r} has no master registered with the name servers")
        response = await self._broker(addr, DLEDGER_LEADERSHIP_TRANSFER, {"target": target})
        return response.remark or "ok"
