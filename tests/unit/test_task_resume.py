"""complete_resuming: a task awaiting a call's future resumes inside the completing callback
when that is safe, and every other case is completed as asyncio does it."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from rocketq.remoting.task_resume import complete_resuming

WAIT_S = 5.0

where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="outside")


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), WAIT_S))


async def waiting_task(future: asyncio.Future[int], seen: list[object]) -> asyncio.Task[None]:
    """A task that sets the context variable, awaits ``future`` and records what it got and the
    variable's value; returned once it is parked on the future."""

    async def body() -> None:
        where.set("the task")
        seen.append(await future)
        seen.append(where.get())

    task = asyncio.get_running_loop().create_task(body())
    await asyncio.sleep(0)  # the task runs up to its await
    assert not task.done()
    return task


async def complete_in_a_read(
    future: asyncio.Future[int], result: int, snapshot: Callable[[], object]
) -> object:
    """complete_resuming called from a loop callback, as a transport's read calls it (no task
    running); returns ``snapshot()`` taken right after the call returned."""
    loop = asyncio.get_running_loop()
    taken: asyncio.Future[object] = loop.create_future()

    def read_callback() -> None:
        complete_resuming(future, result, loop)
        taken.set_result(snapshot())

    loop.call_soon(read_callback)
    return await taken


def test_the_awaiting_task_resumes_inside_a_loop_callback_in_its_own_context() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        seen: list[object] = []
        task = await waiting_task(future, seen)
        # what the task had done before the call returned
        assert await complete_in_a_read(future, 7, lambda: list(seen)) == [7, "the task"]
        assert where.get() == "outside"  # the task's context stayed its own
        await task

    run(main)


def test_inside_a_running_task_the_awaiting_task_resumes_later_as_usual() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        seen: list[object] = []
        task = await waiting_task(future, seen)
        complete_resuming(future, 8, loop)  # this coroutine is a running task: no nesting
        assert future.result() == 8 and seen == []
        await task
        assert seen == [8, "the task"]

    run(main)


def test_a_callback_that_is_not_a_task_wake_up_keeps_call_soon() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        called: list[int] = []
        future.add_done_callback(lambda f: called.append(f.result()))
        assert await complete_in_a_read(future, 9, lambda: list(called)) == []  # not called inside
        await asyncio.sleep(0)
        assert called == [9]

    run(main)


def test_a_task_and_a_second_callback_are_both_run_as_usual() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        seen: list[object] = []
        task = await waiting_task(future, seen)
        called: list[int] = []
        future.add_done_callback(lambda f: called.append(f.result()))
        assert await complete_in_a_read(future, 10, lambda: (list(seen), list(called))) == ([], [])
        await task
        assert seen == [10, "the task"] and called == [10]

    run(main)


def test_a_future_nobody_awaits_is_completed() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        loop.call_soon(complete_resuming, future, 11, loop)
        assert await future == 11

    run(main)


def test_a_task_resumed_inside_raises_into_itself_not_into_the_caller() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()

        async def body() -> None:
            await future
            raise ValueError("the task's own failure")

        task = loop.create_task(body())
        await asyncio.sleep(0)
        assert await complete_in_a_read(future, 12, task.done) is True  # it ran to its end inside
        with pytest.raises(ValueError, match="the task's own failure"):
            await task

    run(main)


def test_a_pure_python_task_is_completed_as_usual() -> None:
    py_task = getattr(asyncio.tasks, "_PyTask", None)
    if py_task is None:  # pragma: no cover - CPython always has it
        pytest.skip("no pure-Python Task here")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        seen: list[object] = []

        async def body() -> None:
            seen.append(await future)

        task = py_task(body(), loop=loop)
        await asyncio.sleep(0)
        assert await complete_in_a_read(future, 13, lambda: list(seen)) == []
        await task
        assert seen == [13]

    run(main)
