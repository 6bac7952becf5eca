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
crash replays whole calls and exactly-once is unchanged (records in flight from one call to
the next, a continuous epoch's: :mod:`goka.group.carried`). A record that fails is handled as
the engine's policy says, in offset order: ``fail`` cancels the records in flight and
raises; ``skip`` and ``dead-letter`` drop its effects and restore its key's state before the
key's next record starts.

(An example: docs/processors.md, "Callbacks that wait on the network".)

An input's event times (``input(..., event_time=...)``) are extracted for each record before
its callback runs, as one at a time. In a group that keeps time (windows, timers, a TTL)
each record in flight runs at the stream time one at a time would give it, and its windows,
timers and TTL change when it is released (:mod:`goka.group.timed_flight`).
"""

from __future__ import annotations

import asyncio
import copy
import random
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from goka.errors import CallbackTimeout
from goka.group.callback_loop import Escaped, await_on_loop, awaited_now, callback_loop
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
    from goka.group.timed_flight import TimedFlight
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
    its records' event times; for a group that keeps time, ``timed`` makes a call's
    :class:`~goka.group.timed_flight.TimedFlight` (``timed(messages, result, decoded)``) and
    ``ticks`` is the topic of its ticks."""

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
    timed: Callable[..., TimedFlight] | None = None
    ticks: str | None = None


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


class _Call:
    """One call's records in flight (see :func:`run_concurrently`)."""

    def __init__(self, engine: Records, messages: Sequence[Message], result: BatchResult) -> None:
        self.engine, self.result, self.result_messages = engine, result, messages
        nil, ticks = engine.nil_handling, engine.ticks
        #: the records run (of ``messages``: by index), each of them with its key (a tick's:
        #: of its own, it waits for none)
        self.index = [n for n, m in enumerate(messages)
                      if m[0] == ticks or m[3] is not None or nil != "ignore"]  # fmt: skip
        self.messages = [messages[n] for n in self.index]
        self.keys: list[Any] = [
            ("tick", n) if m[0] == ticks else decode_text(m[2]) if m[2] is not None else ""
            for n, m in enumerate(self.messages)
        ]
        self.timed = (
            None if engine.timed is None else engine.timed(self.messages, result, self._decoded)
        )
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
        self.out: list[Any] = engine.effects  # where released records' effects go

    async def run(self) -> None:
        self._open()
        try:
            while True:
                self._start()
                if not self.running:  # (all released, or the rest may not start: a cut)
                    break
                done, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
                await self._settle(done)
            if self.cut is not None:
                self._abandon(self.cut)
        finally:
            await self._close()

    def _open(self) -> None:
        """What running the records needs: plain callbacks run on a pool of threads above
        concurrency 1, and on a thread each where a timeout may cut them (the loop's own
        thread cannot be cut)."""
        engine = self.engine
        plain = (engine.concurrency > 1 and engine.timeout is None
                 and not all(self.awaits.values()))  # fmt: skip
        self.pool = ThreadPoolExecutor(engine.concurrency, "goka-callback") if plain else None
        self.running: dict[asyncio.Task[None], int] = {}
        self.failures: dict[int, Exception] = {}
        self.halt: int | None = None  # the first record whose failure ends the call (none
        self.cut: int | None = None  # start after); (timed) the call ends after this record
        self.started: dict[int, float] = {}

    def _start(self) -> None:
        """Start the records that may start now."""
        order, timed, contexts, started, clock = (self.order, self.timed, self.contexts,
                                                  self.started, time.monotonic)  # fmt: skip
        bound, held = self.halt, None
        if timed is not None:  # (a record waits for the place of its key's timer)
            first, held = timed.places(order.released, self.keys)
            bound = _least(self.halt, first)
        for number in order.start(before=bound, held=held):
            contexts[number], started[number] = self._context(number), clock()
            self.running[asyncio.create_task(self._tries(number, self.pool))] = number
        self.flight.most = max(self.flight.most, len(self.running))

    async def _settle(self, done: set[asyncio.Task[None]]) -> None:
        """The records of ``done`` finished: release what may be, in offset order."""
        engine, order, timed, flight = self.engine, self.order, self.timed, self.flight
        contexts, failures, now = self.contexts, self.failures, time.monotonic()
        for task in done:
            number = self.running.pop(task)
            took = now - self.started.pop(number)
            flight.seconds += took
            flight.longest = max(flight.longest, took)
            failure = (RuntimeError(f"record {self.messages[number][1]}'s task was cancelled "
                                    "(by its callback?)") if task.cancelled()
                       else task.exception())  # fmt: skip
            if failure is not None:
                if not isinstance(failure, Exception) or isinstance(failure, Escaped):
                    raise failure
                failures[number] = failure
                if engine.fatal(failure) and (self.halt is None or number < self.halt):
                    self.halt = number
                self._undo(contexts[number])  # (before the key's next record starts)
            elif timed is not None:
                timed.finished(number, contexts[number]._time)
            order.finish(number)
        cut = self.cut
        released = [n for n in order.release() if cut is None or n <= cut]
        flight.held = max(flight.held, order.held)
        if timed is not None and released:  # (on a thread: a timers callback is awaited)
            records = [(n, contexts.pop(n), failures.pop(n, None)) for n in released]
            self.cut = await asyncio.to_thread(timed.release, records)
            if self.cut is not None:
                self.halt = _least(self.halt, self.cut + 1)
            return
        for number in released:
            ctx = contexts.pop(number)
            failure = failures.pop(number, None)
            if failure is None:
                self.out.extend(ctx._effects)
            else:  # fail: raises; else the record is skipped (its effects never joined)
                engine.failed(failure, self.messages[number], sys.maxsize, self.result,
                              context=ctx)  # fmt: skip
            self._released(number)

    def _released(self, number: int) -> None:
        """Record ``number`` was released (its effects went out)."""

    async def _close(self, *, wait: bool = True) -> None:
        """The records end: those still in flight are cancelled (``wait``: for plain
        callbacks on the pool to end)."""
        running = self.running
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        if self.timed is not None:
            self.timed.close()
        if self.pool is not None:  # (waited for off the loop: other calls may use it)
            await asyncio.to_thread(self.pool.shutdown, wait=wait, cancel_futures=True)

    def _abandon(self, cut: int) -> None:
        """The call ends after record ``cut``: the records after it that ran release nothing
        (what they changed of the state is in the call's cache, which goes with the call);
        the caller gives them again."""
        left = len(self.result_messages) - self.index[cut] - 1
        self.result.consumed -= left
        self.result.processed -= left

    def _context(self, number: int) -> Any:
        """A context of record ``number``'s own: its message, key and effects (state is
        shared: a key has one record in flight)."""
        ctx = copy.copy(self.engine.context)
        ctx._bind(self.engine.cache, [])
        ctx._message, ctx._saved, ctx.key = self.messages[number], NOT_SAVED, self.keys[number]
        if self.engine.retry is not None:  # a try's changes are undone before the next try
            ctx._undo = True
        if self.timed is not None:  # its time of its own
            ctx._time = self.timed.record_time(number)
        return ctx

    async def _tries(self, number: int, pool: ThreadPoolExecutor | None) -> None:
        """Decode record ``number`` (a record that cannot be decoded is not tried again) and
        run its callback, tried again as the group's ``retry`` says (each try from the key's
        state before the record, with effects of its own)."""
        message, timed = self.messages[number], self.timed
        if timed is not None and number in timed.is_tick:
            return  # (it fires the wall timers when released)
        callback = self.engine.routes[message[0]][1]
        try:  # (not tried again: a record that cannot be decoded, or has no event time)
            value, at = self._decoded(message) if timed is None else timed.value(number)
        except (KeyboardInterrupt, SystemExit) as exc:  # (an extractor's: the loop goes on)
            raise Escaped(exc) from exc
        retry, tries = self.engine.retry, 0
        while True:
            tries += 1
            ctx = self.contexts[number]
            ctx._event_time, ctx._value = at, value  # (its value: for a window's late policy)
            try:
                await self._call(number, callback, value, pool)
                return
            except Escaped:
                raise
            except Exception as exc:
                if retry is None or tries >= retry.attempts or not retry.covers(exc):
                    raise
                self._undo(self.contexts[number])
                self.contexts[number] = self._context(number)
                await asyncio.sleep(retry.delay(tries))
                value = self._value(message)  # (afresh: a try may have changed it)

    def _decoded(self, message: Message) -> tuple[Any, int]:
        """A record's value and event time (-1 where no input extracts them)."""
        value, times = self._value(message), self.engine.times
        return value, -1 if times is None else times.of(message, value)

    def _value(self, message: Message) -> Any:
        """A record's value, decoded."""
        nil, raw, decode = self.engine.nil_handling, message[3], self.engine.routes[message[0]][0]
        return decode(raw) if raw is not None else (None if nil == "process" else decode(b""))

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
            raise Escaped(exc) from exc
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
            self._cut(ctx)
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
        try:
            await awaited_steps(returned, engine.timeout, lambda took: warn_slow(*where, took),
                                lambda: timed_out(*where, engine.timeout))  # fmt: skip
        except CallbackTimeout:  # (work that outlives its cancellation goes on)
            self._cut(self.contexts[number])
            raise

    def _cut(self, ctx: Any) -> None:
        """The callback of ``ctx`` was cut: what it goes on doing changes nothing, saves no
        state to restore (first), and reads no time but its own writes."""
        ctx._undo = False
        ctx._bind({}, [])
        if self.timed is not None:
            ctx._time.was_cut = True

    def _undo(self, ctx: Any) -> None:
        """Restore the state a failed record changed (the skip and dead-letter policies), once:
        its key's next record may change it after this."""
        if ctx._saved is not NOT_SAVED:
            restore(self.engine.cache, ctx.key, ctx._saved)
        ctx._undo, ctx._saved = False, NOT_SAVED  # (in this order: work of a cut callback
        # that goes on changing the state would save it again, restored at its release)


def _least(a: int | None, b: int | None) -> int | None:
    """The lower of two bounds (None: none)."""
    return b if a is None else a if b is None else min(a, b)
