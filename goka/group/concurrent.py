"""Several records of a partition in flight: a group's ``concurrency`` and async callbacks.

A callback that waits on the network (an HTTP service, a database) holds its partition back
when records run one at a time. With ``define_group(..., concurrency=N)`` the engine runs up
to N records of the messages it is given at once, as :class:`~goka.group.key_order.KeyOrder`
allows: a record starts once every earlier record of its key has finished (so it sees their
state), a busy key holds back only its own records. ``async def`` callbacks are awaited on the
process's callback loop (a thread of its own, so asyncio clients may be kept from call to
call); plain ones run on a pool of N threads (at concurrency 1, in the loop's thread).

What comes out is what running the records one at a time in offset order would give, per
key: each record has a context of its own, and the effects of a record (state, emits,
loopbacks) join the call's in offset order, after those of every record before it. The
call returns once every record finished (the caller commits then, as for any call), so a
crash replays whole calls and exactly-once is unchanged. A record that fails is handled as
the engine's policy says, in offset order: ``fail`` cancels the records in flight and
raises; ``skip`` and ``dead_letter`` drop its effects and restore its key's state before the
key's next record starts.

Example (an enrichment that awaits a service)::

    async def enrich(ctx, click):
        profile = await client.get(f"/users/{ctx.key}")
        ctx.emit("enriched", ctx.key, {**click, "segment": profile["segment"]})

    graph = define_group("enricher", input("clicks", JsonCodec(), enrich),
                         output("enriched", JsonCodec()), concurrency=64)

An input's event times (``input(..., event_time=...)``) are extracted for each record before
its callback runs, as one at a time. Not yet: groups that keep time (windows, timers, a TTL)
run one record at a time (async callbacks awaited, retried, cut by the timeout there by the
engine's own loop: :mod:`goka.group.firing`).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from goka.group.edges import awaited, callable_name
from goka.group.effects import NOT_SAVED, BatchResult, Flight, Message, restore
from goka.group.key_order import KeyOrder
from goka.group.retries import (
    Layer,
    Retry,
    Where,
    awaited_steps,
    check_awaited,
    check_concurrency,
    settle,
    timed_out,
    warn_slow,
    with_concurrency,
)
from goka.keys import decode_text

if TYPE_CHECKING:
    from goka.time.event_time import EventTimes

__all__ = [
    "Records", "await_on_loop", "awaited_now", "awaited_steps", "callback_loop",
    "check_awaited", "check_concurrency", "run_concurrently", "timed_out", "warn_slow",
    "with_concurrency",  # (the checks: retries.py)
]  # fmt: skip


@dataclass(frozen=True)
class Records:
    """What :func:`run_concurrently` uses of an engine: its group's ``concurrency``, its
    context (copied for each record), the batch's state ``cache`` and ``effects``, its
    ``routes`` (``(decode, callback)`` by topic), its ``nil_handling``, its ``failed`` (a
    record's failure under the policy: ``failed(exc, message, mark, result, context=)``), its
    ``fatal`` (does a failure end the call: no record after it starts), the group's
    ``retry`` and ``timeout``, a ``shuffle`` (the tester's: each record yields to the loop
    a random few times before its callback runs, so records finish in a random order), and
    the group's ``times`` (:class:`~goka.time.event_time.EventTimes`) where an input extracts
    its records' event times."""

    concurrency: int
    context: Any
    cache: dict[str, Any]
    effects: list[Any]
    routes: Mapping[str, tuple[Callable[[bytes], Any], Callable[..., Any]]]
    nil_handling: str
    failed: Callable[..., None]
    fatal: Callable[[Exception], bool]
    retry: Retry | None = None
    timeout: float | None = None
    group: str = ""
    shuffle: random.Random | None = None
    times: EventTimes | None = None


def run_concurrently(engine: Records, messages: Sequence[Message], result: BatchResult) -> None:
    """Run ``messages`` through ``engine``'s callbacks, up to its ``concurrency`` at once
    (see the module docstring); their effects go to ``engine.effects`` in offset order, the
    records skipped to ``result.failed``.

    The records are awaited on the process's callback loop (:func:`callback_loop`), which
    outlives the call: an asyncio client made by a callback may be kept for the next ones.
    The calling thread waits (a callback must not wait on an event loop it runs).

    Raises:
        ProcessingError: as :meth:`Engine.process <goka.group.engine.Engine.process>`.
    """
    await_on_loop(_Call(engine, messages, result).run())


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
            raise _Escaped(exc) from exc

    try:
        return asyncio.run_coroutine_threadsafe(carried(), callback_loop()).result()
    except _Escaped as escaped:
        raise escaped.inner from None


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


class _Escaped(Exception):
    """A callback's ``BaseException`` (not an ``Exception``) carried out of the loop, which
    it would stop."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(repr(inner))
        self.inner = inner


class _Call:
    """One call's records in flight (see :func:`run_concurrently`)."""

    def __init__(self, engine: Records, messages: Sequence[Message], result: BatchResult) -> None:
        self.engine, self.result = engine, result
        nil = engine.nil_handling
        self.messages = [m for m in messages if m[3] is not None or nil != "ignore"]
        self.keys = [decode_text(m[2]) if m[2] is not None else "" for m in self.messages]
        self.order = KeyOrder(engine.concurrency)
        waited: dict[str, int] = {}
        seen: set[str] = set()
        for key in self.keys:  # each record after its key's first waits for the one before
            self.order.admit(key)
            if key in seen:
                waited[key] = waited.get(key, 0) + 1
            seen.add(key)
        self.flight = result.flight = Flight(waited=waited)
        #: each input's callback: async (awaited on the loop) or plain
        self.awaits = {topic: awaited(c) for topic, (_, c) in engine.routes.items()}
        self.contexts: dict[int, Any] = {}  # of the records in flight and finished, unreleased

    async def run(self) -> None:
        engine, order = self.engine, self.order
        # plain callbacks run on a pool of threads above concurrency 1, and on a thread each
        # where a timeout may cut them (the loop's own thread cannot be cut)
        plain = (engine.concurrency > 1 and engine.timeout is None
                 and not all(self.awaits.values()))  # fmt: skip
        pool = ThreadPoolExecutor(engine.concurrency, "goka-callback") if plain else None
        running: dict[asyncio.Task[None], int] = {}
        contexts = self.contexts
        failures: dict[int, Exception] = {}
        halt: int | None = None  # the first record whose failure ends the call (none start after)
        flight, clock = self.flight, time.monotonic
        started: dict[int, float] = {}
        try:
            while not order.idle:
                for number in order.start(before=halt):
                    contexts[number], started[number] = self._context(number), clock()
                    running[asyncio.create_task(self._tries(number, pool))] = number
                flight.most = max(flight.most, len(running))
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                now = clock()
                for task in done:
                    number = running.pop(task)
                    took = now - started.pop(number)
                    flight.seconds += took
                    flight.longest = max(flight.longest, took)
                    failure = task.exception()
                    if failure is not None:
                        if not isinstance(failure, Exception) or isinstance(failure, _Escaped):
                            raise failure
                        failures[number] = failure
                        if engine.fatal(failure) and (halt is None or number < halt):
                            halt = number
                        self._undo(contexts[number])  # (before the key's next record starts)
                    order.finish(number)
                for number in order.release():
                    ctx = contexts.pop(number)
                    failure = failures.pop(number, None)
                    if failure is None:
                        engine.effects.extend(ctx._effects)
                    else:  # fail: raises; else the record is skipped, its effects dropped
                        engine.failed(failure, self.messages[number], len(engine.effects),
                                      self.result, context=ctx)  # fmt: skip
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            if pool is not None:  # (waited for off the loop: other calls may use it)
                await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

    def _context(self, number: int) -> Any:
        """A context of record ``number``'s own: its message, key and effects (state is
        shared: a key has one record in flight)."""
        ctx = copy.copy(self.engine.context)
        ctx._bind(self.engine.cache, [])
        ctx._message, ctx._saved, ctx.key = self.messages[number], NOT_SAVED, self.keys[number]
        if self.engine.retry is not None:  # a try's changes are undone before the next try
            ctx._undo = True
        return ctx

    async def _tries(self, number: int, pool: ThreadPoolExecutor | None) -> None:
        """Decode record ``number`` (a record that cannot be decoded is not tried again) and
        run its callback, tried again as the group's ``retry`` says (each try from the key's
        state before the record, with effects of its own)."""
        message, nil = self.messages[number], self.engine.nil_handling
        decode, callback = self.engine.routes[message[0]]
        raw, times = message[3], self.engine.times
        try:  # (not tried again: a record that cannot be decoded, or has no event time)
            value = decode(raw) if raw is not None else (None if nil == "process" else decode(b""))
            at = -1 if times is None else times.of(message, value)
        except (KeyboardInterrupt, SystemExit) as exc:  # (an extractor's: the loop goes on)
            raise _Escaped(exc) from exc
        retry, tries = self.engine.retry, 0
        while True:
            tries += 1
            self.contexts[number]._event_time = at
            try:
                await self._call(number, callback, value, pool)
                return
            except _Escaped:
                raise
            except Exception as exc:
                if retry is None or tries >= retry.attempts or not retry.covers(exc):
                    raise
                self._undo(self.contexts[number])
                self.contexts[number] = self._context(number)
                await asyncio.sleep(retry.delay(tries))

    async def _call(self, number: int, callback: Any, value: Any,
                    pool: ThreadPoolExecutor | None) -> None:  # fmt: skip
        """Run the callback: awaited if async (or if what it returns can be awaited), on a
        thread if plain and there are threads; cut by the timeout."""
        ctx, message, engine = self.contexts[number], self.messages[number], self.engine
        if engine.shuffle is not None:
            for _ in range(engine.shuffle.randrange(4 * engine.concurrency)):
                await asyncio.sleep(0)
        plain = not self.awaits.get(message[0], True)
        try:
            if plain and engine.timeout is not None:
                returned = await self._on_thread(number, callback, ctx, value)
            elif plain and pool is not None:
                loop = asyncio.get_running_loop()
                returned = await loop.run_in_executor(pool, callback, ctx, value)
            else:
                returned = callback(ctx, value)
            await self._awaited(number, callback, returned)
        except (KeyboardInterrupt, SystemExit) as exc:
            raise _Escaped(exc) from exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # (cancelled: the call is ending)
                raise
            raise RuntimeError(f"callback {callable_name(callback)} raised CancelledError "
                               "without being cancelled") from None  # fmt: skip

    async def _on_thread(self, number: int, callback: Any, ctx: Any, value: Any) -> Any:
        """Run a plain callback on a thread of its own, cut by the timeout (its clock starts
        with the thread). Its state changes go to a layer of its own, laid on the shared
        state once it returned in time: a thread that was cut and goes on changes nothing."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        layer = Layer(self.engine.cache)
        ctx._bind(layer, ctx._effects)

        def run() -> None:
            try:
                returned = callback(ctx, value)
            except BaseException as exc:  # (carried to the loop: KeyboardInterrupt too)
                loop.call_soon_threadsafe(settle, done, None, exc)
            else:
                loop.call_soon_threadsafe(settle, done, returned, None)

        threading.Thread(target=run, name="goka-callback", daemon=True).start()
        try:
            async with asyncio.timeout(self.engine.timeout) as cut:
                returned = await asyncio.shield(done)
        except TimeoutError:
            if not cut.expired():  # the callback's own
                raise
            ctx._bind({}, [])  # what the thread does from now on goes nowhere
            message, key, engine = self.messages[number], self.keys[number], self.engine
            raise timed_out(engine.group, engine.context.partition, message, key, callback,
                            engine.timeout) from None  # fmt: skip
        self.engine.cache.update(layer)
        ctx._bind(self.engine.cache, ctx._effects)
        return returned

    async def _awaited(self, number: int, callback: Any, returned: Any) -> None:
        """Await what a callback returned (see :func:`awaited_steps`)."""
        message, key, engine = self.messages[number], self.keys[number], self.engine
        where: Where = (engine.group, engine.context.partition, message, key, callback)
        await awaited_steps(returned, engine.timeout, lambda took: warn_slow(*where, took),
                            lambda: timed_out(*where, engine.timeout))  # fmt: skip

    def _undo(self, ctx: Any) -> None:
        """Restore the state a failed record changed (the skip and dead-letter policies), once:
        its key's next record may change it after this."""
        if ctx._saved is not NOT_SAVED:
            restore(self.engine.cache, ctx.key, ctx._saved)
        ctx._saved = NOT_SAVED
