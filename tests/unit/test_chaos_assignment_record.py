"""The chaos workload's record of consumer assignments, which the poll checks depend on."""

from __future__ import annotations

from rocketq.client import AsyncLitePullConsumer
from rocketq.protocol.queue import MessageQueue
from rocketq.testing.chaos.check import check
from rocketq.testing.chaos.history import Op, Read, Recorder
from rocketq.testing.chaos.workload import Workload, WorkloadConfig


def _workload() -> tuple[Workload, Recorder]:
    recorder = Recorder()
    return Workload(WorkloadConfig("127.0.0.1:9876", "T", queues=2), recorder), recorder


def _assigns(recorder: Recorder) -> list[tuple[int, ...]]:
    return [op.queues for op in recorder.ops() if op.type == "assign"]


def test_regression_a_queue_given_away_and_owned_again_between_two_looks_is_an_assignment() -> None:
    # A lite pull consumer lost a queue and got it back between two polls (a rebalance during a
    # fail-over); its position restarted from the committed offset, which another member had
    # moved on: "offset 491, then 501" was reported as a poll skip (CI), "979, then 938" as a
    # nonmonotonic poll, because the record saw the same queue list before and after.
    workload, recorder = _workload()
    consumer = AsyncLitePullConsumer("G", namesrv_addr="127.0.0.1:9876")
    mq = MessageQueue("T", "broker-a", 2)
    last: list[object] = []
    consumer.assign([mq])
    workload._assignment("c1", consumer, last)
    workload._assignment("c1", consumer, last)
    assert _assigns(recorder) == [(2,)]  # unchanged: one record
    consumer.assign([])
    consumer.assign([mq])  # owned again: a new position
    workload._assignment("c1", consumer, last)
    assert _assigns(recorder) == [(2,), (2,)]


def test_the_checker_takes_a_recorded_reassignment_as_a_break_in_continuity() -> None:
    def poll(offset: int) -> Op:
        return Op("c1", "poll", "ok", topic="T", queue=2, reads=(Read(offset, f"p{offset}"),))

    assign = Op("c1", "assign", "ok", topic="T", queues=(2,))
    without = check([assign, poll(491), poll(501), poll(400)], [], [])
    assert without.anomalies.get("poll_skip") and without.anomalies.get("nonmonotonic_poll")
    with_ = check([assign, poll(491), assign, poll(501), assign, poll(400)], [], [])
    assert not with_.anomalies.get("poll_skip") and not with_.anomalies.get("nonmonotonic_poll")
