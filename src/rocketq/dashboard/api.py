"""The console's JSON API and its process: :class:`DashboardApp` serves the pages and ``/api``
on one :class:`~rocketq.dashboard.http.HttpServer`, answering from a
:class:`~rocketq.dashboard.admin.DashboardAdmin` connected to the name servers.

Lists are paginated (``page``, ``size``, at most 500 rows); a topic's queues and a group's
per-queue progress are read only when their page is opened.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import importlib.resources
import json
import mimetypes
import signal
from typing import Any

from rocketq.client.admin_views import MessageView
from rocketq.dashboard.admin import DashboardAdmin
from rocketq.dashboard.http import HttpError, HttpServer, Request, Response, Router
from rocketq.dashboard.sampler import TpsSampler
from rocketq.errors import MessageNotFound, RocketqError, TopicNotExist
from rocketq.message import decode_offset_msg_id

MAX_PAGE = 500
_SYSTEM_TOPICS = {"TBW102", "SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "BenchmarkTest"}
_STATIC_FILES = {"index.html", "app.js", "app.css"}


def topic_kind(topic: str, cluster_names: set[str] | None = None) -> str:
    """``retry``, ``dlq``, ``system`` or ``normal``."""
    if topic.startswith("%RETRY%"):
        return "retry"
    if topic.startswith("%DLQ%"):
        return "dlq"
    if (
        topic in _SYSTEM_TOPICS
        or topic.upper().startswith("RMQ_SYS_")
        or topic.startswith("rmq_sys_")
        or topic.endswith("_REPLY_TOPIC")
        or (cluster_names is not None and topic in cluster_names)
    ):
        return "system"
    return "normal"


def _page(req: Request, rows: list[Any], default_size: int = 50) -> dict[str, Any]:
    size = min(MAX_PAGE, max(1, req.int_arg("size", default_size)))
    pages = max(1, (len(rows) + size - 1) // size)
    page = min(max(1, req.int_arg("page", 1)), pages)
    return {
        "total": len(rows),
        "page": page,
        "pages": pages,
        "size": size,
        "items": rows[(page - 1) * size : page * size],
    }


def _message(m: MessageView) -> dict[str, Any]:
    doc = m.to_json()
    doc["bodySize"] = len(m.body)
    return doc


def _time_ms(value: object, what: str) -> int:
    """Epoch milliseconds from an integer or an ISO 8601 time (local time when it has no zone)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise HttpError(400, f"{what}={text!r} is neither epoch milliseconds nor an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


class DashboardApp:
    """The console: HTTP server, admin client and TPS sampler on the running event loop."""

    def __init__(
        self,
        namesrv_addr: str,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        sample_interval_s: float = 10.0,
        timeout_ms: int = 5_000,
    ) -> None:
        self.admin = DashboardAdmin(namesrv_addr, timeout_ms=timeout_ms)
        self.router = Router()
        self.http = HttpServer(self.router, host, port)
        self.sampler = TpsSampler(self.admin.topic_list, self._max_offset_sum, sample_interval_s)
        self._routes()

    @property
    def port(self) -> int:
        return self.http.port

    async def start(self) -> None:
        await self.admin.start()
        await self.http.start()
        self.sampler.start()

    async def close(self) -> None:
        await self.sampler.stop()
        await self.http.close()
        await self.admin.shutdown()

    async def dispatch(
        self, method: str, path: str, query: dict[str, str] | None = None, body: Any = None
    ) -> Response:
        """Answer one request without a socket (for tests)."""
        raw = b"" if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if raw else {}
        return await self.http.dispatch(Request(method, path, dict(query or {}), headers, raw))

    def _routes(self) -> None:
        r = self.router
        r.add("GET", "/", self.index)
        r.add("GET", "/static/{name}", self.static)
        r.add("GET", "/api/cluster", self.cluster)
        r.add("GET", "/api/topics", self.topics)
        r.add("POST", "/api/topics", self.create_topic)
        r.add("GET", "/api/topics/{topic}", self.topic)
        r.add("DELETE", "/api/topics/{topic}", self.delete_topic)
        r.add("GET", "/api/topics/{topic}/queues", self.topic_queues)
        r.add("GET", "/api/topics/{topic}/tps", self.topic_tps)
        r.add("GET", "/api/groups", self.groups)
        r.add("GET", "/api/groups/{group}", self.group)
        r.add("GET", "/api/groups/{group}/progress", self.group_progress)
        r.add("POST", "/api/groups/{group}/reset", self.reset_offset)
        r.add("GET", "/api/messages/by-key", self.by_key)
        r.add("GET", "/api/messages/by-id", self.by_id)
        r.add("GET", "/api/messages/by-offset", self.by_offset)
        r.add("GET", "/api/messages/by-time", self.by_time)
        r.add("POST", "/api/messages/resend", self.resend)
        r.add("GET", "/api/dlq", self.dlq)
        r.add("GET", "/api/trace", self.trace)

    # -- static ----------------------------------------------------------------------------------
    async def index(self, req: Request) -> Response:
        return self._file("index.html")

    async def static(self, req: Request) -> Response:
        return self._file(req.params["name"])

    def _file(self, name: str) -> Response:
        if name not in _STATIC_FILES:
            raise HttpError(404, f"no such file: {name}")
        data = importlib.resources.files("rocketq.dashboard").joinpath("static", name).read_bytes()
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            ctype += "; charset=utf-8"
        return Response(200, data, ctype)

    # -- cluster ---------------------------------------------------------------------------------
    async def cluster(self, req: Request) -> Response:
        entries = await self.admin.cluster_list()

        async def one(addr: str) -> dict[str, str]:
            try:
                return await self.admin.broker_runtime_info(addr)
            except RocketqError as exc:
                return {"error": str(exc)}

        infos = await asyncio.gather(*(one(e.addr) for e in entries))
        brokers = []
        for e, info in zip(entries, infos, strict=True):
            brokers.append(
                {
                    "cluster": e.cluster,
                    "brokerName": e.broker_name,
                    "brokerId": e.broker_id,
                    "addr": e.addr,
                    "role": "MASTER" if e.broker_id == 0 else "SLAVE",
                    "version": info.get("brokerVersionDesc", ""),
                    "diskRatio": info.get("commitLogDiskRatio"),
                    "putTps": info.get("putTps", ""),
                    "getTps": info.get("getTransferredTps", ""),
                    "msgPutTotalToday": info.get("msgPutTotalTodayNow", ""),
                    "runtime": info.get("runtime", ""),
                    "error": info.get("error", ""),
                }
            )
        return Response.json({"namesrv": self.admin.namesrv_addrs, "brokers": brokers})

    async def _cluster_names(self) -> set[str]:
        info = await self.admin.cluster_info()
        return set(info.cluster_addr_table) | set(info.broker_addr_table)

    # -- topics ----------------------------------------------------------------------------------
    async def topics(self, req: Request) -> Response:
        q = req.arg("q", "").strip().lower()
        kind = req.arg("kind", "normal")
        names = await self._cluster_names()
        rows = []
        for t in await self.admin.topic_list():
            k = topic_kind(t, names)
            if (kind in ("all", k)) and q in t.lower():
                rows.append({"topic": t, "kind": k})
        return Response.json(_page(req, rows))

    async def create_topic(self, req: Request) -> Response:
        doc = req.json()
        topic = str(doc.get("topic", "")).strip()
        if not topic:
            raise HttpError(400, "topic is required")
        try:
            read = int(doc.get("readQueueNums", 8))
            write = int(doc.get("writeQueueNums", read))
            perm = int(doc.get("perm", 6))
        except (TypeError, ValueError):
            raise HttpError(400, "readQueueNums, writeQueueNums and perm must be integers") from None
        if perm not in (2, 4, 6):
            raise HttpError(400, f"perm={perm} must be 2 (read), 4 (write) or 6 (read and write)")
        try:
            addrs = await self.admin.create_topic(topic, read, write, perm)
        except RocketqError as exc:
            raise HttpError(400, str(exc)) from None
        return Response.json({"topic": topic, "brokers": addrs}, 201)

    async def _route(self, topic: str) -> Any:
        try:
            return await self.admin.topic_route(topic)
        except TopicNotExist as exc:
            raise HttpError(404, str(exc)) from None

    async def topic(self, req: Request) -> Response:
        topic = req.params["topic"]
        route = await self._route(topic)
        brokers = [
            {
                "brokerName": bd.broker_name,
                "cluster": bd.cluster,
                "addrs": {str(k): v for k, v in bd.broker_addrs.items()},
            }
            for bd in route.broker_datas
        ]
        queues = [
            {
                "brokerName": qd.broker_name,
                "readQueueNums": qd.read_queue_nums,
                "writeQueueNums": qd.write_queue_nums,
                "perm": qd.perm,
            }
            for qd in route.queue_datas
        ]
        return Response.json(
            {"topic": topic, "kind": topic_kind(topic), "brokers": brokers, "queueData": queues}
        )

    async def delete_topic(self, req: Request) -> Response:
        topic = req.params["topic"]
        route = await self._route(topic)
        clusters = sorted({bd.cluster for bd in route.broker_datas})
        for cluster in clusters:
            await self.admin.delete_topic(topic, cluster)
        return Response.json({"topic": topic, "clusters": clusters})

    async def topic_queues(self, req: Request) -> Response:
        topic = req.params["topic"]
        try:
            status = await self.admin.topic_status(topic)
        except TopicNotExist as exc:
            raise HttpError(404, str(exc)) from None
        rows = [
            {
                "brokerName": s.broker_name,
                "queueId": s.queue_id,
                "minOffset": s.min_offset,
                "maxOffset": s.max_offset,
                "messages": max(0, s.max_offset - s.min_offset),
                "lastUpdateTimestamp": s.last_update_timestamp,
            }
            for s in status
        ]
        doc = _page(req, rows)
        doc["totalMessages"] = sum(r["messages"] for r in rows)
        return Response.json(doc)

    async def topic_tps(self, req: Request) -> Response:
        topic = req.params["topic"]
        points = self.sampler.series(topic)
        return Response.json(
            {
                "topic": topic,
                "intervalS": self.sampler.interval_s,
                "points": [{"t": t, "tps": v} for t, v in points],
            }
        )

    async def _max_offset_sum(self, topic: str) -> int:
        return sum(s.max_offset for s in await self.admin.topic_status(topic))

    # -- consumer groups -------------------------------------------------------------------------
    async def groups(self, req: Request) -> Response:
        q = req.arg("q", "").strip().lower()
        seen: dict[str, dict[str, Any]] = {}
        for addr in (await self.admin.masters()).values():
            for name, cfg in (await self.admin.subscription_groups(addr)).items():
                row = seen.setdefault(
                    name,
                    {
                        "group": name,
                        "orderly": bool(cfg.get("consumeMessageOrderly")),
                        "broadcast": bool(cfg.get("consumeBroadcastEnable")),
                        "retryMaxTimes": cfg.get("retryMaxTimes"),
                        "brokers": [],
                    },
                )
                row["brokers"].append(addr)
        rows = [r for n, r in sorted(seen.items()) if q in n.lower()]
        return Response.json(_page(req, rows))

    async def group(self, req: Request) -> Response:
        group = req.params["group"]
        members: dict[str, dict[str, Any]] = {}
        subscriptions: dict[str, Any] = {}
        for addr in (await self.admin.masters()).values():
            doc = await self.admin.consumer_connections(addr, group)
            for c in doc.get("connectionSet") or []:
                cid = str(c.get("clientId", ""))
                members[cid] = {
                    "clientId": cid,
                    "clientAddr": c.get("clientAddr", ""),
                    "language": c.get("language", ""),
                    "version": c.get("version", ""),
                    "versionDesc": _version_desc(c.get("version")),
                }
            for t, sub in (doc.get("subscriptionTable") or {}).items():
                subscriptions[str(t)] = sub.get("subString", "*") if isinstance(sub, dict) else "*"
        return Response.json(
            {
                "group": group,
                "members": sorted(members.values(), key=lambda m: m["clientId"]),
                "subscriptions": subscriptions,
                "online": bool(members),
            }
        )

    async def group_progress(self, req: Request) -> Response:
        group = req.params["group"]
        topic = req.arg("topic", "") or None
        try:
            progress = await self.admin.consumer_progress(group, topic)
        except RocketqError as exc:
            return Response.json({**_page(req, []), "totalLag": 0, "consumeTps": 0.0, "note": str(exc)})
        rows = [
            {
                "topic": q.topic,
                "brokerName": q.broker_name,
                "queueId": q.queue_id,
                "brokerOffset": q.broker_offset,
                "consumerOffset": q.consumer_offset,
                "lag": q.lag,
                "lastTimestamp": q.last_timestamp,
            }
            for q in progress.queues
        ]
        doc = _page(req, rows)
        doc.update(
            totalLag=progress.total_lag,
            consumeTps=progress.consume_tps,
            topics=sorted({q.topic for q in progress.queues}),
        )
        return Response.json(doc)

    async def reset_offset(self, req: Request) -> Response:
        group = req.params["group"]
        doc = req.json()
        topic = str(doc.get("topic", "")).strip()
        if not topic:
            raise HttpError(400, "topic is required")
        if "timestamp" not in doc:
            raise HttpError(400, "timestamp is required (epoch ms or ISO 8601)")
        ts = _time_ms(doc["timestamp"], "timestamp")
        try:
            table = await self.admin.reset_offset_by_time(group, topic, ts, force=True)
        except RocketqError as exc:
            raise HttpError(400, str(exc)) from None
        rows = [
            {"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off} for mq, off in table.items()
        ]
        return Response.json({"group": group, "topic": topic, "timestamp": ts, "offsets": rows})

    # -- messages --------------------------------------------------------------------------------
    async def by_key(self, req: Request) -> Response:
        topic, key = req.arg("topic"), req.arg("key")
        try:
            found = await self.admin.query_msg_by_key(topic, key, min(MAX_PAGE, req.int_arg("max", 64)))
        except TopicNotExist as exc:
            raise HttpError(404, str(exc)) from None
        return Response.json({"messages": [_message(m) for m in found]})

    async def by_id(self, req: Request) -> Response:
        """An offset message id is asked of the broker it names, only when that broker is one of
        the cluster's; a client message id (UNIQ_KEY) is looked up as a key of ``topic``."""
        msg_id = req.arg("id").strip()
        topic = req.arg("topic", "").strip()
        if topic:
            found = [m for m in await self.admin.query_msg_by_key(topic, msg_id, 16) if m.uniq_key == msg_id]
            if found:
                return Response.json({"messages": [_message(m) for m in found]})
        m = await self._stored(msg_id)
        return Response.json({"messages": [_message(m)]})

    async def _stored(self, msg_id: str) -> MessageView:
        """The message with offset message id ``msg_id`` from a broker of the cluster."""
        try:
            addr = decode_offset_msg_id(msg_id).address
        except (ValueError, OverflowError):
            raise HttpError(
                404, f"{msg_id!r} is not an offset message id (give the topic for a client id)"
            ) from None
        known = {e.addr for e in await self.admin.cluster_list()}
        if addr not in known:
            raise HttpError(404, f"message id {msg_id!r} names {addr}, which is no broker of this cluster")
        try:
            return await self.admin.query_msg_by_id(msg_id)
        except RocketqError as exc:
            raise HttpError(404, str(exc)) from None

    async def by_offset(self, req: Request) -> Response:
        topic, broker = req.arg("topic"), req.arg("broker")
        queue, offset = req.int_arg("queue"), req.int_arg("offset")
        count = min(MAX_PAGE, max(1, req.int_arg("count", 1)))
        try:
            found = await self.admin.pull_range(topic, broker, queue, offset, count)
        except (TopicNotExist, MessageNotFound) as exc:
            raise HttpError(404, str(exc)) from None
        return Response.json({"messages": [_message(m) for m in found]})

    async def by_time(self, req: Request) -> Response:
        """Messages of ``topic`` stored in [begin, end]: each queue's offset at ``begin`` (29),
        then pulls until the store time passes ``end``; at most ``max`` messages, oldest first."""
        topic = req.arg("topic")
        begin = _time_ms(req.arg("begin"), "begin")
        end = _time_ms(req.arg("end", str(2**62)), "end")
        limit = min(MAX_PAGE, max(1, req.int_arg("max", 64)))
        route = await self._route(topic)
        masters = {bd.broker_name: bd.master_addr for bd in route.broker_datas if bd.master_addr}
        out: list[MessageView] = []
        for qd in route.queue_datas:
            addr = masters.get(qd.broker_name)
            if addr is None:
                continue
            for queue_id in range(qd.read_queue_nums):
                offset = await self.admin.search_offset(addr, topic, queue_id, begin)
                taken = 0
                while taken < limit:
                    batch = await self.admin.pull_range(
                        topic, qd.broker_name, queue_id, offset, min(32, limit)
                    )
                    if not batch:
                        break
                    stop = False
                    for m in batch:
                        if m.store_timestamp > end:
                            stop = True
                            break
                        if m.store_timestamp >= begin:
                            out.append(m)
                            taken += 1
                    if stop:
                        break
                    offset = batch[-1].queue_offset + 1
        out.sort(key=lambda m: (m.store_timestamp, m.commit_log_offset))
        return Response.json({"messages": [_message(m) for m in out[:limit]], "truncated": len(out) > limit})

    async def resend(self, req: Request) -> Response:
        """Deliver a stored message again: to one member of ``group`` with CONSUME_MESSAGE_DIRECTLY
        when the broker relays it, else as a new message (same body, tags and keys) sent to
        ``topic`` (default: the original topic of a retry/dead-letter message, else its topic)."""
        doc = req.json()
        msg_id = str(doc.get("msgId", "")).strip()
        if not msg_id:
            raise HttpError(400, "msgId is required")
        m = await self._stored(msg_id)
        group = str(doc.get("group", "") or "").strip()
        if group:
            members = []
            for addr in (await self.admin.masters()).values():
                conns = await self.admin.consumer_connections(addr, group)
                members += [(addr, str(c.get("clientId", ""))) for c in conns.get("connectionSet") or []]
            for addr, client_id in members[:1]:
                answer = await self.admin.consume_directly(addr, group, client_id, msg_id, m.topic)
                if answer is not None:
                    return Response.json(
                        {"how": "CONSUME_MESSAGE_DIRECTLY", "clientId": client_id, "result": answer}
                    )
        target = str(doc.get("topic", "") or "").strip() or m.properties.get("RETRY_TOPIC") or m.topic
        if target.startswith("%DLQ%"):
            raise HttpError(400, "choose the topic to resend this dead-letter message to")
        keys = " ".join(m.keys) or None
        try:
            result = await self.admin.send_message(target, m.body, m.tags, keys)
        except RocketqError as exc:
            raise HttpError(400, str(exc)) from None
        return Response.json(
            {"how": "send", "topic": target, "msgId": result.msg_id, "offsetMsgId": result.offset_msg_id}
        )

    async def dlq(self, req: Request) -> Response:
        rows = []
        for t in await self.admin.topic_list():
            if not t.startswith("%DLQ%"):
                continue
            try:
                status = await self.admin.topic_status(t)
                count = sum(max(0, s.max_offset - s.min_offset) for s in status)
            except RocketqError:
                count = -1
            rows.append({"topic": t, "group": t[len("%DLQ%") :], "messages": count})
        return Response.json(_page(req, rows))

    async def trace(self, req: Request) -> Response:
        msg_id = req.arg("id").strip()
        topic = req.arg("traceTopic", "RMQ_SYS_TRACE_TOPIC")
        try:
            events = await self.admin.query_msg_trace_by_id(msg_id, topic)
        except TopicNotExist:
            events = []
        rows = [dataclasses.asdict(e) | {"status": e.status} for e in events]
        return Response.json({"msgId": msg_id, "events": rows})


def _version_desc(version: object) -> str:
    from rocketq.remoting.codes import Version  # noqa: PLC0415

    try:
        return Version(int(str(version))).name
    except (ValueError, TypeError):
        return str(version)


async def start_dashboard(
    namesrv_addr: str, host: str = "127.0.0.1", port: int = 8080, *, sample_interval_s: float = 10.0
) -> DashboardApp:
    """Start a console on the running loop; ``close()`` it at the end."""
    app = DashboardApp(namesrv_addr, host, port, sample_interval_s=sample_interval_s)
    try:
        await app.start()
    except BaseException:
        await app.close()
        raise
    return app


async def run_dashboard(
    namesrv_addr: str, host: str = "127.0.0.1", port: int = 8080, *, sample_interval_s: float = 10.0
) -> None:
    """Serve the console until SIGINT/SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    app = await start_dashboard(namesrv_addr, host, port, sample_interval_s=sample_interval_s)
    print(f"rocketq dashboard on http://{host}:{app.port}/ (name server {namesrv_addr})", flush=True)
    try:
        await stop.wait()
    finally:
        await app.close()
