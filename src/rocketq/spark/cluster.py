"""What the Spark driver asks the cluster: queues and their offset ranges, offsets by time,
consumer-group commits.

The data source's driver-side objects live in short-lived Python workers (the planner, the
stream-source runner, the commit worker), so each call here opens its own
:class:`~rocketq.client.admin.AsyncAdmin` on a private event loop (``asyncio.run``) and closes it
before returning. One call costs one route lookup per topic plus one request per broker::

    queue_ranges:   GET_ROUTEINFO_BY_TOPIC (105) per topic → read address per broker
                    GET_TOPIC_STATS_INFO (202) per read address → min/max offset per queue
    offsets_at:     SEARCH_OFFSET_BY_TIMESTAMP (29) per queue
    commit_offsets: UPDATE_CONSUMER_OFFSET (15) per queue (answered, so failures are seen)

The read address of a broker name is its master's, or, while the route lists no master, its
slave with the lowest broker id: RocketMQ's consumers read from a slave when the master is
unavailable (``findBrokerAddressInSubscribe``). In a DLedger group every member serves the
committed messages only (dispatch stops at the committed position), so a read from a follower,
or from the new master after a fail-over, returns the same messages at the same offsets.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from rocketq.acl.signature import AclClientRpcHook
from rocketq.client.admin import AsyncAdmin
from rocketq.client.aio import error_for_response
from rocketq.client.config import ClientConfig
from rocketq.errors import BodyFormatError, ResponseCode, RocketqError, TopicNotExist
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.queue import message_queue_table
from rocketq.protocol.route import MASTER_ID, TopicRouteData
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request
from rocketq.spark.offsets import QueueRef
from rocketq.spark.options import ReadOptions, TlsOptions

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class QueueRange:
    """One queue's offsets on its broker and the master's address."""

    min_offset: int
    max_offset: int
    addr: str


@dataclass(frozen=True, slots=True)
class Session:
    """An admin client and a remoting client for direct broker requests, on one event loop."""

    admin: AsyncAdmin
    client: RemotingClient
    timeout_s: float

    async def call(self, addr: str, code: int, fields: dict[str, object], what: str) -> RemotingCommand:
        """One request to a broker; error responses raise (naming ``what``)."""
        response = await self.client.invoke(addr, create_request(code, fields), self.timeout_s)
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, what)
        return response


def acl_hook(keys: tuple[str, str] | None) -> AclClientRpcHook | None:
    """The request signer of the options ``accessKey``/``secretKey``; None without them."""
    return AclClientRpcHook(*keys) if keys is not None else None


def ssl_context(tls: TlsOptions | None) -> ssl.SSLContext | None:
    """The client TLS context of the options ``tls``/``tlsCaPath``/…; None without TLS."""
    return tls.context() if tls is not None else None


def acl_config(keys: tuple[str, str] | None, tls: TlsOptions | None = None) -> ClientConfig | None:
    """A client config with the options' ACL account and TLS; None without either."""
    if keys is None and tls is None:
        return None
    fields: dict[str, object] = {}
    if keys is not None:
        fields.update(access_key=keys[0], secret_key=keys[1])
    if tls is not None:
        fields.update(
            tls=True, tls_ca_path=tls.ca_path, tls_cert_path=tls.cert_path, tls_key_path=tls.key_path
        )
    return ClientConfig(**fields)  # type: ignore[arg-type]


def run(
    name_server: str,
    timeout_ms: int,
    work: Callable[[Session], Awaitable[T]],
    keys: tuple[str, str] | None = None,
    tls: TlsOptions | None = None,
) -> T:
    """Run ``work(session)`` with fresh clients on a private event loop; both sign their
    requests with ``keys`` (access key, secret key) when given, and connect with ``tls``."""

    async def main() -> T:
        client = RemotingClient(rpc_hook=acl_hook(keys), ssl=ssl_context(tls))
        try:
            async with AsyncAdmin(name_server, config=acl_config(keys, tls), timeout_ms=timeout_ms) as admin:
                return await work(Session(admin, client, timeout_ms / 1000))
        finally:
            await client.close()

    return asyncio.run(main())


async def _topics(admin: AsyncAdmin, opts: ReadOptions) -> list[str]:
    if opts.topic_pattern is None:
        return list(opts.topics)
    return [t for t in await admin.topic_list() if opts.matches_topic(t)]


def read_addresses(route: TopicRouteData) -> dict[str, str]:
    """Broker name → the address to read from: the master's, else the slave with the lowest id."""
    out: dict[str, str] = {}
    for bd in route.broker_datas:
        addrs = {bid: addr for bid, addr in bd.broker_addrs.items() if addr}
        if addrs:
            out[bd.broker_name] = addrs[MASTER_ID] if MASTER_ID in addrs else addrs[min(addrs)]
    return out


async def _queue_offsets(session: Session, topic: str, addr: str) -> list[tuple[str, int, int, int]]:
    """(broker name, queue id, min offset, max offset) of each queue of ``topic`` on ``addr``."""
    what = f"topic stats of {topic!r} from {addr}"
    response = await session.call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}, what)
    try:
        doc = OBJECT_KEYS.loads(response.body or b"{}")
    except ValueError as exc:
        raise BodyFormatError(f"{what}: {exc}") from None
    if not isinstance(doc, dict):
        raise BodyFormatError(f"{what}: not a JSON object")
    out = []
    for mq, value in message_queue_table(doc.get("offsetTable")).items():
        v = value if isinstance(value, dict) else {}
        out.append((mq.broker_name, mq.queue_id, int(v.get("minOffset", 0)), int(v.get("maxOffset", 0))))
    return out


async def queue_ranges_async(session: Session, opts: ReadOptions) -> dict[QueueRef, QueueRange]:
    admin = session.admin
    out: dict[QueueRef, QueueRange] = {}
    for topic in await _topics(admin, opts):
        try:
            addrs = read_addresses(await admin.topic_route(topic))
        except TopicNotExist:
            if opts.topic_pattern is None:
                raise
            continue  # deleted between the topic list and the route lookup
        if not addrs and opts.topic_pattern is None:
            raise TopicNotExist(f"topic {topic!r} has no broker in its route")
        for name, addr in sorted(addrs.items()):
            for broker, queue_id, lo, hi in await _queue_offsets(session, topic, addr):
                out[QueueRef(topic, broker or name, queue_id)] = QueueRange(lo, hi, addr)
    return dict(sorted(out.items()))


def queue_ranges(opts: ReadOptions) -> dict[QueueRef, QueueRange]:
    """Every queue of the option's topics with its min/max offset (sorted by topic, broker, id)."""
    return run(
        opts.name_server, opts.request_timeout_ms, lambda s: queue_ranges_async(s, opts), opts.keys, opts.tls
    )


def offsets_at(
    opts: ReadOptions, queues: Mapping[QueueRef, QueueRange], timestamp_ms: int
) -> dict[QueueRef, int]:
    """The first offset of each queue whose store time is ``>= timestamp_ms``."""

    async def work(session: Session) -> dict[QueueRef, int]:
        out: dict[QueueRef, int] = {}
        for ref, info in queues.items():
            fields: dict[str, object] = {
                "topic": ref.topic,
                "queueId": ref.queue_id,
                "timestamp": timestamp_ms,
            }
            what = f"{ref.broker}@{info.addr}"
            response = await session.call(info.addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields, what)
            out[ref] = int(response.ext_fields.get("offset", info.max_offset))
        return out

    return run(opts.name_server, opts.request_timeout_ms, work, opts.keys, opts.tls)


def commit_offsets(
    opts: ReadOptions, group: str, offsets: Mapping[QueueRef, int], queues: Mapping[QueueRef, QueueRange]
) -> None:
    """Store ``offsets`` as ``group``'s consumer offsets (so ``consumerProgress`` shows the lag).
    Failures are logged, not raised: the checkpoint, not the group, is the query's position."""

    async def work(session: Session) -> None:
        for ref, offset in sorted(offsets.items()):
            info = queues.get(ref)
            if info is None:
                continue
            fields: dict[str, object] = {
                "consumerGroup": group,
                "topic": ref.topic,
                "queueId": ref.queue_id,
                "commitOffset": offset,
            }
            try:
                what = f"{ref.broker}@{info.addr}"
                await session.call(info.addr, RequestCode.UPDATE_CONSUMER_OFFSET, fields, what)
            except RocketqError as exc:
                log.warning("commit of offset %d of %s for group %s failed: %s", offset, ref, group, exc)

    run(opts.name_server, opts.request_timeout_ms, work, opts.keys, opts.tls)


__all__ = [
    "QueueRange",
    "Session",
    "commit_offsets",
    "offsets_at",
    "queue_ranges",
    "queue_ranges_async",
    "read_addresses",
    "run",
]
