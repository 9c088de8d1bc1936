"""Drive the official ``rocketmq-python-client`` (RocketMQ 5 gRPC SDK) from a test, as its own process.

Run with the interpreter of the client's venv (see ``grpc_harness.py``); it must not import
rocketq (the two sets of generated stubs cannot share a process). Output: one JSON object per
line on stdout (``event`` names what happened); the SDK logs to ``$HOME/logs``. Credentials:
``$ROCKETQ_INTEROP_AK``/``$ROCKETQ_INTEROP_SK`` (none when unset); a client that cannot start
emits ``error`` with ``stage: startup``.

    produce  ENDPOINT SPEC.json            send the messages of SPEC (list of dicts: topic, body,
                                           tag, keys, group, delay_ms, tx=commit|rollback|orphan,
                                           props); with orphans, stay until the server's checks
                                           were answered (the checker commits bodies starting
                                           with "commit" and rolls back the others)
    simple   ENDPOINT GROUP TOPIC COUNT MODE [SECONDS] [FILTER]
                                           SimpleConsumer; MODE ack | redeliver (first delivery
                                           is not acked but made visible again after 1 s)
    push     ENDPOINT GROUP TOPIC COUNT MODE [SECONDS]
                                           PushConsumer; MODE ok | fail (every delivery fails)
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

_EMIT_LOCK = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """Write one event line. Push-consumer callbacks run on several threads: one write per line,
    under a lock, so lines never interleave."""
    line = json.dumps({"event": event, **fields}) + "\n"
    with _EMIT_LOCK:
        sys.stdout.write(line)
        sys.stdout.flush()


def config(endpoint: str) -> ClientConfiguration:
    ak, sk = os.environ.get("ROCKETQ_INTEROP_AK", ""), os.environ.get("ROCKETQ_INTEROP_SK", "")
    return ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=5)


def started(client: Any) -> bool:
    """``client.startup()``; False (after an ``error`` event) when it raised."""
    try:
        client.startup()
    except Exception as exc:
        emit("error", stage="startup", error=f"{type(exc).__name__}: {exc}")
        try:
            client.shutdown()
        except Exception:
            pass
        return False
    return True


def view(msg: Any) -> dict[str, Any]:
    return {
        "id": msg.message_id,
        "body": bytes(msg.body).decode("utf-8", "replace"),
        "tag": msg.tag,
        "keys": list(msg.keys or []),
        "group": msg.message_group,
        "attempt": msg.delivery_attempt,
        "topic": msg.topic,
        "props": dict(msg.properties or {}),
        "corrupted": bool(getattr(msg, "corrupted", False)),
    }


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.expected = 0
        self.seen: set[str] = set()
        self.all_checked = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        body = bytes(message.body).decode("utf-8", "replace")
        commit = body.startswith("commit")
        emit("checked", id=message.message_id, body=body, resolution="commit" if commit else "rollback")
        self.seen.add(message.message_id)
        if len(self.seen) >= self.expected:
            self.all_checked.set()
        return TransactionResolution.COMMIT if commit else TransactionResolution.ROLLBACK


def produce(endpoint: str, spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec: list[dict[str, Any]] = json.load(f)
    checker = Checker()
    topics = sorted({s["topic"] for s in spec})
    producer = Producer(config(endpoint), topics, checker)
    if not started(producer):
        return 0
    emit("ready")
    checker.expected = sum(1 for s in spec if s.get("tx") == "orphan")
    for i, item in enumerate(spec):
        msg = Message()
        msg.topic = item["topic"]
        msg.body = item["body"].encode("utf-8")
        if item.get("tag"):
            msg.tag = item["tag"]
        if item.get("keys"):
            type(msg).keys.fset(msg, *item["keys"])
        if item.get("group"):
            msg.message_group = item["group"]
        if item.get("delay_ms"):
            msg.delivery_timestamp = int(time.time() * 1000) + int(item["delay_ms"])
        for k, v in (item.get("props") or {}).items():
            msg.add_property(k, v)
        try:
            tx_mode = item.get("tx")
            if tx_mode:
                tx = producer.begin_transaction()
                receipt = producer.send(msg, tx)
                if tx_mode == "commit":
                    tx.commit()
                elif tx_mode == "rollback":
                    tx.rollback()
            else:
                receipt = producer.send(msg)
            emit("sent", i=i, id=receipt.message_id, offset=receipt.offset)
        except Exception as exc:
            emit("error", i=i, error=f"{type(exc).__name__}: {exc}")
    if checker.expected:
        if not checker.all_checked.wait(float(sys.argv[4]) if len(sys.argv) > 4 else 60.0):
            emit("error", error=f"only {len(checker.seen)} of {checker.expected} orphans were checked")
        time.sleep(0.5)  # let the client's EndTransaction(SOURCE_SERVER_CHECK) go out
    producer.shutdown()
    emit("done")
    return 0


def simple(endpoint: str, group: str, topic: str, count: int, mode: str, seconds: float, expr: str) -> int:
    kind, _, text = expr.partition(":")
    filt = FilterExpression(text or "*") if kind != "SQL" else FilterExpression(text, 2)
    consumer = SimpleConsumer(config(endpoint), group, {topic: filt}, await_duration=2)
    if not started(consumer):
        return 0
    emit("ready")
    acked = 0
    deadline = time.monotonic() + seconds
    while acked < count and time.monotonic() < deadline:
        try:
            messages = consumer.receive(32, 10)
        except Exception as exc:
            emit("error", error=f"{type(exc).__name__}: {exc}")
            time.sleep(0.2)
            continue
        for m in messages:
            emit("message", **view(m))
            if mode == "redeliver" and m.delivery_attempt == 1:
                consumer.change_invisible_duration(m, 1)
                continue
            consumer.ack(m)
            acked += 1
    emit("done", acked=acked)
    consumer.shutdown()
    return 0


class Listener(MessageListener):
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.seen = 0

    def consume(self, message: Message) -> ConsumeResult:
        self.seen += 1
        emit("message", **view(message))
        return ConsumeResult.FAILURE if self.mode == "fail" else ConsumeResult.SUCCESS


def push(endpoint: str, group: str, topic: str, count: int, mode: str, seconds: float) -> int:
    listener = Listener(mode)
    consumer = PushConsumer(config(endpoint), group, listener, {topic: FilterExpression()})
    consumer.startup()
    emit("ready")
    deadline = time.monotonic() + seconds
    while listener.seen < count and time.monotonic() < deadline:
        time.sleep(0.05)
    emit("done", seen=listener.seen)
    consumer.shutdown()
    return 0


def main() -> int:
    cmd = sys.argv[1]
    if cmd == "produce":
        return produce(sys.argv[2], sys.argv[3])
    seconds = float(sys.argv[7]) if len(sys.argv) > 7 else 60.0
    args = sys.argv[2:7]
    if cmd == "simple":
        expr = sys.argv[8] if len(sys.argv) > 8 else "TAG:*"
        return simple(args[0], args[1], args[2], int(args[3]), args[4], seconds, expr)
    if cmd == "push":
        return push(args[0], args[1], args[2], int(args[3]), args[4], seconds)
    emit("error", error=f"unknown command {cmd}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
