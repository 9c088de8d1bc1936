"""The paced flusher of a DLedger member (``RaftGroupLog._flusher``, APPENDED acks) ends when the
member stops, whenever the stop comes."""

from __future__ import annotations

import asyncio
import threading

from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.driver_config import DLedgerConfig


class StopRightAfterTheWait(threading.Event):
    """A stop event that the member sets (then wakes the flusher) just after the flusher's first
    paced wait came back unset: the interleaving that left the flusher asleep for good."""

    def __init__(self, member: RaftGroupLog) -> None:
        super().__init__()
        self.member = member
        self.fired = False

    def wait(self, timeout: float | None = None) -> bool:
        if not self.fired:
            self.fired = True
            self.set()
            self.member._flusher_wake.set()
            return False
        return super().wait(timeout)


def test_a_stop_between_the_paced_wait_and_the_idle_sleep_ends_the_flusher(tmp_path: object) -> None:
    member = RaftGroupLog(DLedgerConfig(self_id="n0", peers=(("n0", "127.0.0.1:1"),), data_dir=str(tmp_path)))
    member._store = object()  # type: ignore[assignment]  # idle: the flusher never touches it
    loop = asyncio.new_event_loop()
    try:
        thread = threading.Thread(
            target=member._flusher, args=(loop, StopRightAfterTheWait(member)), daemon=True
        )
        thread.start()
        thread.join(5)
        assert not thread.is_alive(), "the flusher slept through the stop"
    finally:
        loop.close()
