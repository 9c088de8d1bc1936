"""Throughput of the RocketMQ 5 gRPC endpoint of ``rocketq serve``.

Starts ``rocketq serve`` (free ports, data in a tmp dir), creates topic BenchGrpc, then:

* ``load generator``: our own stubs over ``grpc.aio``; ``--concurrency`` SendMessage calls in
  flight, each carrying ``--batch`` messages, then ReceiveMessage (batch 32) + AckMessage until
  every message is consumed;
* ``official client`` (with ``--client-python PATH``, the python of a venv holding
  ``rocketmq-python-client``): the SDK's Producer sending ``--sdk-count`` messages one by one.

    .venv/bin/python bench/grpc_endpoint.py --count 20000 --client-python /tmp/rocketq-interop-venv/bin/python
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

import grpc

from rocketq.client.admin import Admin
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc

TOPIC = "BenchGrpc"
ROOT = pathlib.Path(__file__).resolve().parents[1]


def start_server(data: pathlib.Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", str(data),
         "--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    found: dict[str, str] = {}
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while len(found) < 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.match(r"\s*(name server|broker|gRPC \(v5\))\s+(\S+:\d+)", line)
        if m:
            found[m.group(1)] = m.group(2)
    if len(found) < 3:
        proc.kill()
        raise SystemExit("rocketq serve did not start")
    return proc, found


async def load(addr: str, count: int, batch: int, concurrency: int, body_bytes: int) -> dict[str, float]:
    async with grpc.aio.insecure_channel(addr) as channel:
        stub: Any = service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        body = b"x" * body_bytes
        next_id = iter(range(count))
        sent = 0

        async def sender() -> None:
            nonlocal sent
            while True:
                ids = [i for _, i in zip(range(batch), next_id, strict=False)]
                if not ids:
                    return
                msgs = [
                    pb.Message(
                        topic=pb.Resource(name=TOPIC),
                        body=body,
                        system_properties=pb.SystemProperties(
                            message_id=f"B{i:030d}", message_type=pb.NORMAL
                        ),
                    )
                    for i in ids
                ]
                r = await stub.SendMessage(spb.SendMessageRequest(messages=msgs), timeout=30)
                assert r.status.code == pb.OK, r.status
                sent += len(ids)

        began = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        send_s = time.perf_counter() - began
        mq = pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0)
        received = 0

        async def receiver() -> None:
            nonlocal received
            while received < count:
                handles: list[spb.AckMessageEntry] = []
                async for part in stub.ReceiveMessage(
                    spb.ReceiveMessageRequest(
                        group=pb.Resource(name="BenchGroup"), message_queue=mq, batch_size=32,
                        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                        invisible_duration={"seconds": 60}, long_polling_timeout={"seconds": 1},
                    ),
                    timeout=10,
                ):  # fmt: skip
                    if part.WhichOneof("content") == "message":
                        sp = part.message.system_properties
                        handles.append(
                            spb.AckMessageEntry(message_id=sp.message_id, receipt_handle=sp.receipt_handle)
                        )
                if handles:
                    received += len(handles)
                    await stub.AckMessage(
                        spb.AckMessageRequest(
                            group=pb.Resource(name="BenchGroup"),
                            topic=pb.Resource(name=TOPIC),
                            entries=handles,
                        ),
                        timeout=10,
                    )

        began = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(receiver() for _ in range(concurrency))), 600)
        receive_s = time.perf_counter() - began
    return {
        "sent": sent,
        "send_msgs_per_s": sent / send_s,
        "received": received,
        "receive_msgs_per_s": received / receive_s,
    }


def sdk_send(client_python: str, addr: str, count: int, workdir: pathlib.Path) -> dict[str, float]:
    spec = workdir / "spec.json"
    spec.write_text(json.dumps([{"topic": TOPIC, "body": "x" * 100} for _ in range(count)]), encoding="utf-8")
    env = {**os.environ, "HOME": str(workdir), "PYTHONPATH": ""}
    script = ROOT / "tests" / "interop" / "grpc_py_client.py"
    began = time.perf_counter()
    proc = subprocess.Popen(
        [client_python, str(script), "produce", addr, str(spec)], stdout=subprocess.PIPE, env=env, text=True
    )
    assert proc.stdout is not None
    first = None
    sent = 0
    for line in proc.stdout:
        event = json.loads(line)
        if event["event"] == "ready":
            first = time.perf_counter()
        elif event["event"] == "sent":
            sent += 1
    proc.wait(600)
    end = time.perf_counter()
    return {"sdk_sent": sent, "sdk_send_msgs_per_s": sent / (end - (first or began))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--body-bytes", type=int, default=100)
    ap.add_argument("--client-python", default=None)
    ap.add_argument("--sdk-count", type=int, default=2_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocketq-bench-grpc-") as tmp:
        work = pathlib.Path(tmp)
        proc, addrs = start_server(work / "data")
        try:
            with Admin(addrs["name server"]) as admin:
                admin.create_topic(TOPIC, 8, 8, 6, broker_addr=addrs["broker"])
            result: dict[str, float] = asyncio.run(
                load(addrs["gRPC (v5)"], args.count, args.batch, args.concurrency, args.body_bytes)
            )
            if args.client_python:
                result.update(sdk_send(args.client_python, addrs["gRPC (v5)"], args.sdk_count, work))
        finally:
            proc.terminate()
            proc.wait(30)
    print(json.dumps({k: round(v, 1) for k, v in result.items()}))


if __name__ == "__main__":
    main()
