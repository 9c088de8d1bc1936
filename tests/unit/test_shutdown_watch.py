"""The watch over a server process's shutdown (rocketq.broker.shutdown_watch): the stacks of its
threads and tasks once it takes long, the exit once it takes too long, nothing once disarmed.
Real threads and a real log file; the process exit is replaced by a recorder."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import subprocess
import sys
import threading

import pytest

from _support.procs import child_env
from rocketq.broker.shutdown_watch import EXIT_CODE, ShutdownWatch

WAIT_S = 10.0


def stuck_in_a_shutdown_step(release: threading.Event) -> None:
    release.wait(WAIT_S)


async def awaiting_an_answer_that_never_comes(never: asyncio.Event) -> None:
    await never.wait()


def test_a_shutdown_that_takes_too_long_is_reported_with_every_stack_and_then_ended(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    worker = threading.Thread(target=stuck_in_a_shutdown_step, args=(release,))
    worker.start()
    log_path = tmp_path / "broker.log"
    codes: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        exited = asyncio.Event()

        def exit_process(code: int) -> None:
            codes.append(code)
            loop.call_soon_threadsafe(exited.set)

        never = asyncio.Event()
        task = loop.create_task(awaiting_an_answer_that_never_comes(never), name="drain")
        with open(log_path, "w", encoding="utf-8") as stream:
            watch = ShutdownWatch(loop, report_s=0.05, limit_s=0.3, stream=stream, exit_process=exit_process)
            watch.arm()
            watch.arm()  # a second signal starts no second watch
            await asyncio.wait_for(exited.wait(), WAIT_S)
            assert watch.join(WAIT_S)
        task.cancel()

    try:
        with caplog.at_level(logging.INFO, logger="rocketq.broker.shutdown_watch"):
            asyncio.run(main())
    finally:
        release.set()
        worker.join(WAIT_S)
    assert codes == [EXIT_CODE]
    dump = log_path.read_text(encoding="utf-8")
    assert "stuck_in_a_shutdown_step" in dump  # the blocked thread's stack (faulthandler)
    messages = [r.getMessage() for r in caplog.records]
    assert any("shutdown still running after 0 s" in m for m in messages), messages
    tasks = next(m for m in messages if "asyncio tasks" in m)
    assert "awaiting_an_answer_that_never_comes" in tasks and "drain" in tasks
    assert any("shutdown did not finish within 0 s" in m for m in messages), messages


def test_a_disarmed_watch_reports_nothing_and_never_exits(caplog: pytest.LogCaptureFixture) -> None:
    codes: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        watch = ShutdownWatch(loop, report_s=0.05, limit_s=0.1, exit_process=codes.append)
        watch.arm()
        watch.disarm()
        assert watch.join(WAIT_S)

    with caplog.at_level(logging.INFO, logger="rocketq.broker.shutdown_watch"):
        asyncio.run(main())
    assert codes == [] and not caplog.records


def test_the_report_comes_before_the_limit() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="report_s=2 must be > 0 and <= limit_s=1"):
            ShutdownWatch(asyncio.get_running_loop(), report_s=2, limit_s=1)

    asyncio.run(main())


def run_child(source: str, tmp_path: pathlib.Path) -> tuple[int, str]:
    """Run ``source`` in a Python process of its own: its exit status and its output."""
    log_path = tmp_path / "child.log"
    with open(log_path, "wb") as out:
        done = subprocess.run(
            [sys.executable, "-c", source],
            check=False,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env(),
            timeout=WAIT_S,
        )
    return done.returncode, log_path.read_text(encoding="utf-8")


CHILD = """
import asyncio, logging, threading
from rocketq.broker.shutdown_watch import ShutdownWatch

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

def blocked_in_the_loop_thread(never):
    never.wait()  # a shutdown step that blocks the event loop for good

async def main():
    watch = ShutdownWatch(asyncio.get_running_loop(), report_s=0.2, limit_s=0.6)
    watch.arm()
    blocked_in_the_loop_thread(threading.Event())

asyncio.run(main())
"""


def test_a_process_whose_shutdown_blocks_its_loop_reports_the_stack_and_exits(tmp_path: pathlib.Path) -> None:
    """In a process of its own: the event loop blocked (no task report can run), the thread
    stacks still reach stderr, and the process ends with EXIT_CODE instead of hanging."""
    returncode, text = run_child(CHILD, tmp_path)
    assert returncode == EXIT_CODE, text
    assert "WARNING rocketq.broker.shutdown_watch: shutdown still running" in text
    assert "blocked_in_the_loop_thread" in text  # the loop thread's stack, from faulthandler
    assert "ERROR rocketq.broker.shutdown_watch: shutdown did not finish within 1 s" in text


CHILD_HOLDING_THE_GIL = """
import asyncio, logging, re
from rocketq.broker.shutdown_watch import ShutdownWatch
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

def holding_the_gil():
    # one C call that never lets another Python thread run: a regex that backtracks for ages
    re.match(r"(a+)+$", "a" * 64 + "b")

async def main():
    watch = ShutdownWatch(asyncio.get_running_loop(), report_s=0.2, limit_s=0.6, backstop_s=1.5)
    watch.arm()
    holding_the_gil()

asyncio.run(main())
"""


def test_a_process_whose_shutdown_holds_the_gil_is_ended_by_the_backstop(tmp_path: pathlib.Path) -> None:
    """A shutdown step stuck in a C call that holds the GIL starves the watch's own thread (no
    report, no exit at the limit); the backstop, faulthandler's watchdog, still writes the
    stacks and ends the process."""
    returncode, text = run_child(CHILD_HOLDING_THE_GIL, tmp_path)
    assert returncode == 1, text  # faulthandler's exit, not the watch's EXIT_CODE
    assert "Timeout (0:00:01.500000)!" in text  # faulthandler's watchdog fired
    assert "holding_the_gil" in text  # the stuck thread's stack


def test_a_backstop_comes_after_the_limit() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match=r"backstop_s=0\.5 must be > limit_s=1\.0"):
            ShutdownWatch(loop, report_s=0.5, limit_s=1.0, backstop_s=0.5)
    finally:
        loop.close()
