"""The chaos history (rocketq.testing.chaos.history): ops, their JSONL round trip, the recorder
from several threads, and which send failures are definite."""

from __future__ import annotations

import pathlib
import threading

import pytest

from rocketq.errors import (
    ConnectionClosed,
    MessageIllegal,
    NoPermission,
    RemotingConnectError,
    RemotingTimeout,
    ServerError,
    ServiceNotAvailable,
    SystemBusy,
)
from rocketq.testing.chaos.history import (
    Op,
    Read,
    Recorder,
    classify_send_error,
    classify_send_status,
    load_history,
    write_history,
)


def test_an_op_round_trips_through_json(tmp_path: pathlib.Path) -> None:
    ops = [
        Op("p0", "send", "invoke", wall_ms=5, mono_ns=7, topic="T", payload="p0-0", key="k"),
        Op("p0", "send", "ok", topic="T", queue=2, offset=9, msg_id="AB", status="SEND_OK", client_retries=2),
        Op("c0", "poll", "ok", topic="T", queue=2, reads=(Read(9, "p0-0", "AB"), Read(10, "x"))),
        Op("c0", "assign", "ok", queues=(0, 2)),
        Op("d", "drain", "ok", topic="T", queue=2, node="n1", reads=()),
    ]
    path = str(tmp_path / "h.jsonl")
    write_history(path, ops)
    assert load_history(path) == ops


def test_bad_ops_are_refused() -> None:
    with pytest.raises(ValueError, match="op type 'get'"):
        Op("p", "get", "ok")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="op phase 'done'"):
        Op("p", "send", "done")  # type: ignore[arg-type]


def test_load_history_skips_a_torn_last_line_and_names_a_bad_one(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "h.jsonl"
    good = '{"process":"p","type":"send","phase":"invoke","payload":"a"}\n'
    path.write_text(good + '{"process":"p","ty')
    assert [op.payload for op in load_history(str(path))] == ["a"]
    path.write_text('{"process":"p","ty\n' + good)
    with pytest.raises(ValueError, match=r"h.jsonl:1: not a JSON op line"):
        load_history(str(path))
    path.write_text('{"process":"p","type":"send","phase":"ok","colour":1}\n')
    with pytest.raises(ValueError, match=r"h.jsonl:1: unknown op fields \['colour'\]"):
        load_history(str(path))


def test_the_recorder_keeps_every_op_of_every_thread(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "h.jsonl")
    with Recorder(path) as rec:

        def work(n: int) -> None:
            for i in range(200):
                inv = rec.invoke(f"p{n}", "send", topic="T", payload=f"p{n}-{i}")
                rec.complete(inv, "ok", queue=n, offset=i)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ops = rec.ops()
    assert len(ops) == 1600
    assert load_history(path) == ops
    done = [op for op in ops if op.phase == "ok"]
    assert all(op.definite is None and op.mono_ns > 0 and op.wall_ms > 0 for op in done)


def test_complete_marks_definite_and_indeterminate() -> None:
    rec = Recorder()
    inv = rec.invoke("p", "send", payload="a")
    assert rec.complete(inv, "fail", error="x").definite is True
    assert rec.complete(inv, "info", error="y").definite is False
    with pytest.raises(ValueError, match="ok, fail or info"):
        rec.complete(inv, "invoke")


@pytest.mark.parametrize(
    ("exc", "phase"),
    [
        (ServiceNotAvailable("this broker is not the leader of its DLedger group"), "fail"),
        (SystemBusy("too many appends"), "fail"),
        (NoPermission("the broker sending message is forbidden"), "fail"),
        (MessageIllegal("body too large"), "fail"),
        (RemotingConnectError("refused"), "fail"),
        (RemotingTimeout("no answer"), "info"),
        (ConnectionClosed("dropped"), "info"),
        (ServerError("DLedger append TIMEOUT: the message may or may not be stored"), "info"),
        (TimeoutError(), "info"),
        (RuntimeError("something else"), "info"),
    ],
)
def test_send_errors_are_definite_only_when_nothing_was_appended(exc: BaseException, phase: str) -> None:
    assert classify_send_error(exc)[0] == phase


def test_with_sdk_retries_only_a_single_listed_attempt_keeps_its_class() -> None:
    one = RemotingConnectError("refused")
    one.add_note("send to topic 'T' failed 1 time(s): attempt 1 to b queue 0: refused")
    assert classify_send_error(one, client_retries=2)[0] == "fail"
    several = RemotingConnectError("refused")
    several.add_note("send to topic 'T' failed 3 time(s): ...")
    assert classify_send_error(several, client_retries=2)[0] == "info"
    assert classify_send_error(MessageIllegal("bad"), client_retries=2)[0] == "info"  # no note: unknown


def test_send_statuses() -> None:
    assert classify_send_status("SEND_OK") == "ok"
    for status in ("FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"):
        assert classify_send_status(status) == "info"
    with pytest.raises(ValueError, match="unknown send status"):
        classify_send_status("MAYBE")
