"""The process's event loop of callbacks: where async callbacks are awaited, by records in
flight (:mod:`goka.group.concurrent`) and by records run one at a time (the caller waiting)."""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from typing import Any

from goka.group.retries import Where, awaited_steps, timed_out, warn_slow

__all__ = ["Escaped", "await_on_loop", "awaited_now", "callback_loop"]


def awaited_now(returned: Any, timeout: float | None, where: Where) -> None:
    """What a callback of a record run alone returned, if it can be awaited (an ``async
    def``'s coroutine, or what a ``def`` returned, as a decorator's wrapper does): awaited on
    the callback loop, the caller waiting (else ignored); its steps timed and cut after
    ``timeout`` as records in flight are (:func:`awaited_steps`). ``where``: the group,
    partition, message, key and callback, for the warning and the timeout's error."""
    if inspect.isawaitable(returned):
        await_on_loop(awaited_steps(
            returned, timeout, lambda took: warn_slow(*where, took),
            lambda: timed_out(*where, timeout)))  # fmt: skip


def await_on_loop(awaitable: Any) -> Any:
    """Await ``awaitable`` on :func:`callback_loop`, the calling thread waiting; its result.

    Raises:
        BaseException: what it raised (a ``KeyboardInterrupt`` or ``SystemExit`` too).
    """

    async def carried() -> Any:
        try:
            return await awaitable
        except (KeyboardInterrupt, SystemExit) as exc:
            raise Escaped(exc) from exc

    loop = callback_loop()
    if _loop is not None and threading.current_thread() is _loop[2]:
        raise RuntimeError(
            "awaited on the callbacks' loop from its own thread: it would wait "
            "for itself (a callback of records in flight that runs an engine?)"
        )
    future = asyncio.run_coroutine_threadsafe(carried(), loop)
    try:
        return future.result()
    except Escaped as escaped:
        raise escaped.inner from None
    except BaseException:  # (the waiting thread's own: the awaitable stops too)
        future.cancel()
        raise


#: (the process that runs it, the loop, its thread)
_loop: tuple[int, asyncio.AbstractEventLoop, threading.Thread] | None = None
_loop_lock = threading.Lock()


def callback_loop() -> asyncio.AbstractEventLoop:
    """The process's event loop of callbacks, on a daemon thread of its own (started once,
    and again in a forked child, which has the parent's loop but not its thread, or if its
    thread ended): every engine's records in flight are awaited there, call after call."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid() or not _loop[2].is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="goka-callbacks",
                                      daemon=True)  # fmt: skip
            thread.start()
            _loop = (os.getpid(), loop, thread)
        return _loop[1]


class Escaped(Exception):
    """A callback's ``BaseException`` (not an ``Exception``) carried out of the loop, which
    it would stop."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(repr(inner))
        self.inner = inner
