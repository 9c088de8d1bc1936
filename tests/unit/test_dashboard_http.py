"""The console's HTTP layer over a real socket, its argument parsing, the topic kinds and the TPS
sampler's arithmetic (without a cluster)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from rocketq.dashboard.api import _time_ms, topic_kind
from rocketq.dashboard.http import MAX_BODY, HttpError, HttpServer, Request, Response, Router
from rocketq.dashboard.sampler import TpsSampler


async def _echo(req: Request) -> Response:
    return Response.json(
        {"params": req.params, "query": req.query, "body": req.json(), "n": req.int_arg("n", 1)}
    )


async def _boom(req: Request) -> Response:
    raise RuntimeError("kaput")


async def _exchange(port: int, raw: bytes) -> tuple[int, dict[str, object]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body)


def test_routes_params_queries_and_errors_over_a_socket() -> None:
    async def scenario() -> None:
        router = Router()
        router.add("POST", "/api/things/{name}", _echo)
        router.add("GET", "/boom", _boom)
        server = HttpServer(router, "127.0.0.1", 0)
        await server.start()
        try:
            body = b'{"a": 1}'
            status, doc = await _exchange(
                server.port,
                b"POST /api/things/%25DLQ%25g?n=3&x=y HTTP/1.1\r\nHost: t\r\nOrigin: http://t\r\n"
                b"Content-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body,
            )
            assert status == 200
            assert doc == {
                "params": {"name": "%DLQ%g"},
                "query": {"n": "3", "x": "y"},
                "body": {"a": 1},
                "n": 3,
            }
            status, doc = await _exchange(server.port, b"GET /api/things/x HTTP/1.1\r\n\r\n")
            assert status == 405 and "not allowed" in str(doc["error"])
            status, doc = await _exchange(server.port, b"GET /nowhere HTTP/1.1\r\n\r\n")
            assert status == 404
            status, doc = await _exchange(server.port, b"GET /boom HTTP/1.1\r\n\r\n")
            assert status == 500 and "kaput" in str(doc["error"])
            json_post = b"POST /api/things/x HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            status, doc = await _exchange(server.port, json_post + b"Content-Length: 5\r\n\r\n[1,2]")
            assert status == 400 and "JSON object" in str(doc["error"])
            # what a page of another site can send: a text/plain body, or its own Origin
            plain = b"POST /api/things/x HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}"
            status, doc = await _exchange(server.port, plain)
            assert status == 415 and "application/json" in str(doc["error"])
            status, doc = await _exchange(
                server.port, json_post + b"Origin: http://evil.example\r\nContent-Length: 2\r\n\r\n{}"
            )
            assert status == 403 and "own pages" in str(doc["error"])
            too_big = f"POST /api/things/x HTTP/1.1\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode()
            status, doc = await _exchange(server.port, too_big)
            assert status == 413
            status, doc = await _exchange(server.port, b"NONSENSE\r\n\r\n")
            assert status == 400
        finally:
            await server.close()

    asyncio.run(scenario())


def test_int_arg_names_a_bad_value() -> None:
    req = Request("GET", "/", {"page": "two"}, {}, b"")
    with pytest.raises(HttpError, match=r"page='two' is not an integer"):
        req.int_arg("page", 1)
    with pytest.raises(HttpError, match="missing query argument 'topic'"):
        req.arg("topic")


def test_times_are_epoch_ms_or_iso() -> None:
    assert _time_ms(1700000000000, "t") == 1700000000000
    assert _time_ms("1700000000000", "t") == 1700000000000
    assert _time_ms("2023-11-14T22:13:20+00:00", "t") == 1700000000000
    with pytest.raises(HttpError, match="neither epoch milliseconds nor an ISO 8601 time"):
        _time_ms("yesterday", "begin")


def test_topic_kinds() -> None:
    assert topic_kind("%RETRY%g") == "retry"
    assert topic_kind("%DLQ%g") == "dlq"
    assert topic_kind("RMQ_SYS_TRACE_TOPIC") == "system"
    assert topic_kind("DefaultCluster", {"DefaultCluster"}) == "system"
    assert topic_kind("Orders") == "normal"


def test_sampler_turns_max_offsets_into_rates() -> None:
    totals = iter([100, 150, 150])

    async def topics() -> list[str]:
        return ["T"]

    async def total(topic: str) -> int:
        return next(totals)

    async def scenario() -> list[tuple[int, float]]:
        sampler = TpsSampler(topics, total, interval_s=1.0)
        for _ in range(3):
            await sampler.sample_once()
        return sampler.series("T")

    series = asyncio.run(scenario())
    assert len(series) == 2
    assert series[0][1] > 0 and series[1][1] == 0.0
    assert all(t <= time.time() * 1000 + 1 for t, _ in series)
    with pytest.raises(ValueError, match="interval_s"):
        TpsSampler(topics, total, interval_s=0)
