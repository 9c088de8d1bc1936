"""The synchronous face of an asyncio client object.

A facade owns one private event loop in one daemon thread: :meth:`BlockingFacade.start` creates
the thread and starts the core on it, :meth:`BlockingFacade.shutdown` shuts the core down and
joins the thread. Blocking methods hand coroutines to that loop and wait for the result; there is
no global loop and nothing keeps running after ``shutdown``. Calling a blocking method from the
facade's own loop thread would deadlock, so it raises instead.

A facade offers what its asyncio class offers, without spelling it out again:

* :func:`takes_arguments_of` gives the facade's ``__init__`` the asyncio class's constructor
  signature (``inspect.signature`` lists its keywords, type checkers check calls against it); the
  facade passes the arguments on, so the asyncio class rejects an unknown keyword (TypeError);
* :func:`blocking` makes a facade method of a coroutine method of the asyncio class (run on the
  loop, waited for), :func:`on_loop` one of a plain method (run on the loop when it runs); both
  keep the asyncio method's name, signature and docstring.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, Self, TypeVar, cast

from rocketq.client.config import ClientConfig
from rocketq.errors import ClientStateError

T = TypeVar("T")
P = ParamSpec("P")


class Core(Protocol):
    """What a facade needs of the asyncio object it drives."""

    @property
    def config(self) -> ClientConfig: ...

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...


C = TypeVar("C", bound=Core)
F = TypeVar("F", bound="BlockingFacade[Any]")


class BlockingFacade(Generic[C]):
    """Base of :class:`~rocketq.client.Producer`, the consumers and the admin facade: drives
    ``core`` on the private loop."""

    def __init__(self, core: C, thread_name: str, what: str) -> None:
        self._core = core
        self._thread_name = thread_name
        self._what = what  # names the object in errors: "producer PG", "admin"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def core(self) -> C:
        """The asyncio object this facade drives (use it only on the facade's loop)."""
        return self._core

    @property
    def config(self) -> ClientConfig:
        return self._core.config

    # -- what subclasses may change ---------------------------------------------------------------
    def _core_start(self) -> Coroutine[Any, Any, None]:
        return self._core.start()

    def _core_shutdown(self) -> Coroutine[Any, Any, None]:
        return self._core.shutdown()

    def _on_loop_started(self) -> None:
        """Called under the start lock once the loop thread runs (e.g. to create worker pools)."""

    def _on_loop_stopped(self) -> None:
        """Called after the loop thread has stopped."""

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the private event-loop thread and the core on it; idempotent."""
        with self._lock:
            if self._loop is not None:
                return
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=run, name=self._thread_name, daemon=True)
            thread.start()
            ready.wait()
            self._loop, self._thread = loop, thread
            self._on_loop_started()
        try:
            self._call(self._core_start())
        except BaseException:
            self._stop_loop()
            raise

    def shutdown(self) -> None:
        """Shut the core down and stop the thread; idempotent."""
        if self._loop is None:
            return
        try:
            self._call(self._core_shutdown())
        finally:
            self._stop_loop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # -- calling into the loop --------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        if loop is None or loop.is_closed():
            coro.close()
            raise ClientStateError(f"{self._what} is not started")
        if self._thread is threading.current_thread():
            coro.close()
            raise RuntimeError(f"a blocking method of {self._what} was called on its own event loop")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def _sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a non-blocking core method: on the loop when started, else right here."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return fn(*args)

        async def run() -> T:
            return fn(*args)

        return self._call(run())

    def _stop_loop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join()
            loop.close()
        self._on_loop_stopped()


def takes_arguments_of(
    core_class: Callable[P, object],
) -> Callable[[Callable[Concatenate[F, ...], None]], Callable[Concatenate[F, P], None]]:
    """Give the decorated ``__init__(self, *args, **kwargs)`` the signature of ``core_class``'s
    constructor: what ``inspect.signature`` shows and what type checkers check calls against."""

    def mark(init: Callable[Concatenate[F, ...], None]) -> Callable[Concatenate[F, P], None]:
        init.__signature__ = inspect.signature(core_class.__init__)  # type: ignore[attr-defined]
        return cast("Callable[Concatenate[F, P], None]", init)

    return mark


def blocking(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Any, P], T]:
    """The facade method that runs the core's coroutine ``method`` on the loop and waits for it."""

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return cast("T", self._call(method(self._core, *args, **kwargs)))

    functools.update_wrapper(call, method)
    return call


def on_loop(method: Callable[Concatenate[Any, P], T]) -> Callable[Concatenate[Any, P], T]:
    """The facade method that runs the core's plain ``method`` on the loop (here before start)."""

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return cast("T", self._sync(functools.partial(method, self._core, *args, **kwargs)))

    functools.update_wrapper(call, method)
    return call
