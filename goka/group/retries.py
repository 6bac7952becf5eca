"""A group's records in flight, as declared and around the callbacks (used by
:mod:`goka.group.concurrent`): ``concurrency``, :class:`Retry` and the ``timeout`` as
``define_group`` checks them; :class:`Steps`, which times each step of an async callback to
find the blocking call that holds the event loop (and every record in flight) back; and
:class:`Layer`, the state a plain callback under a timeout changes, kept apart."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from goka.errors import (
    Abort,
    CallbackTimeout,
    CodecError,
    ContextError,
    GraphError,
    MessageTooLargeError,
    StorageError,
)
from goka.group.edges import awaited, callable_name
from goka.time.specs import Session

if TYPE_CHECKING:
    from goka.group.effects import Message

__all__ = ["NEVER_RETRIED", "SLOW_STEP_SECONDS", "Layer", "Retry", "RunQueue", "Steps", "Where",
           "awaited_steps", "check_awaited", "check_concurrency", "check_retry", "check_timeout",
           "run_queue", "settle", "timed_out", "warn_slow", "with_concurrency"]  # fmt: skip

log = logging.getLogger("goka.group.concurrent")  # (its warnings: where records are in flight)

#: Where a callback ran, for its warnings and errors: group, partition, message, key, callback.
Where = tuple[str, int, "Message", str, Any]

#: What a try raises that trying again cannot change.
NEVER_RETRIED = (Abort, StorageError, ContextError, MessageTooLargeError, CodecError)

#: A step of an async callback (what runs between two of its awaits) longer than this holds
#: every record in flight back: a blocking call inside ``async def``, warned about once.
SLOW_STEP_SECONDS = 0.1


@dataclass(frozen=True)
class Retry:
    """Per-record retries of a group's input and loop callbacks
    (``define_group(..., retry=Retry(...))``).

    A record whose callback raises one of ``on`` (a cut by the group's ``timeout`` raises
    :class:`~goka.errors.CallbackTimeout`, a ``TimeoutError``: the default ``on`` covers it) is
    tried again, up to ``attempts`` tries in all: after ``backoff`` seconds, then each wait
    ``multiplier`` times the last, at most ``max_backoff``. Each try starts from the key's
    state before the record; what earlier tries emitted is dropped. Only the record's key waits
    meanwhile: other keys' records go on (up to the group's ``concurrency``). When the tries are
    spent, the processor's ``on_error`` policy handles the last failure. ``ctx.fail()``, a
    store's failure, a misuse of the context, a message too large and a codec's error are
    never tried again (:meth:`covers`); nor is a record that cannot be decoded.
    """

    attempts: int = 3
    backoff: float = 0.1
    multiplier: float = 2.0
    max_backoff: float = 10.0
    on: tuple[type[Exception], ...] = (Exception,)

    def delay(self, tries: int) -> float:
        """Seconds to wait after the ``tries``-th failed try."""
        try:
            wait = self.backoff * self.multiplier ** (tries - 1)
        except OverflowError:
            wait = self.max_backoff
        return float(min(self.max_backoff, wait))

    def covers(self, exc: Exception) -> bool:
        """Is a try that raised ``exc`` tried again? (Not for what trying again cannot
        change: ``ctx.fail()``, a store's failure, a misuse of the context, a message too
        large for the broker, a value its codec cannot handle.)"""
        return isinstance(exc, self.on) and not isinstance(exc, NEVER_RETRIED)


def check_retry(group: str, retry: object) -> Retry | None:
    """``retry`` if it is None or a valid :class:`Retry`.

    Raises:
        GraphError: it is not.
    """
    if retry is None:
        return None
    if not isinstance(retry, Retry):
        raise GraphError(f"group {group!r}: retry must be a goka.Retry, got {retry!r}")
    wrong = []
    if isinstance(retry.attempts, bool) or not isinstance(retry.attempts, int) or (
            retry.attempts < 1):  # fmt: skip
        wrong.append(f"attempts must be a whole number of at least 1, got {retry.attempts!r}")
    for name, least in (("backoff", 0.0), ("multiplier", 1.0), ("max_backoff", 0.0)):
        value = getattr(retry, name)
        if not isinstance(value, int | float) or isinstance(value, bool) or not (
                math.isfinite(value) and value >= least):  # fmt: skip
            wrong.append(f"{name} must be a number of at least {least:g}, got {value!r}")
    if not wrong and retry.max_backoff < retry.backoff:
        wrong.append(f"max_backoff ({retry.max_backoff:g}) is below backoff ({retry.backoff:g})")
    on = retry.on
    if not isinstance(on, tuple) or not on or not all(
            isinstance(c, type) and issubclass(c, Exception) for c in on):  # fmt: skip
        wrong.append(f"on must be a non-empty tuple of Exception classes, got {on!r}")
    if wrong:
        raise GraphError(f"group {group!r}: retry: {'; '.join(wrong)}")
    return retry


def check_timeout(group: str, timeout: object) -> float | None:
    """``timeout`` (a callback's longest try: seconds or a timedelta) in seconds, or None.

    Raises:
        GraphError: it is not positive and finite.
    """
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not (
            math.isfinite(seconds) and seconds > 0):  # fmt: skip
        raise GraphError(f"group {group!r}: timeout must be a positive number of seconds or "
                         f"a timedelta, got {timeout!r}")  # fmt: skip
    return float(seconds)


class RunQueue:
    """How long this thread waited for a CPU (Linux's ``/proc/thread-self/schedstat``: on a
    busy machine a step is slow without holding the loop itself), read at a mark taken at
    most every :data:`MARK_SECONDS` (a read costs microseconds) and once more after a slow
    step. Elsewhere it says 0."""

    MARK_SECONDS = 0.05

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None
        self.at, self.waited = -1.0, 0

    def _read(self) -> int:
        assert self.fd is not None
        return int(os.pread(self.fd, 96, 0).split()[1])

    def mark(self, now: float) -> None:
        """Take a mark now, unless the last is recent."""
        if self.fd is not None and now - self.at > self.MARK_SECONDS:
            self.at, self.waited = now, self._read()

    def since_mark(self) -> float:
        """Seconds this thread waited for a CPU since the mark (at least its wait during a
        step that began after the mark)."""
        return 0.0 if self.fd is None else (self._read() - self.waited) / 1e9


_queues = threading.local()


def run_queue() -> RunQueue:
    """This thread's :class:`RunQueue`."""
    queue: RunQueue | None = getattr(_queues, "queue", None)
    if queue is None:
        queue = _queues.queue = RunQueue()
    return queue


class Steps:
    """Awaits a coroutine, timing each step (what runs between two of its awaits): one that
    holds the loop :data:`SLOW_STEP_SECONDS` or longer (its time less what the thread waited
    for a CPU meanwhile: :class:`RunQueue`) is reported to ``slow``."""

    __slots__ = ("coro", "slow")

    def __init__(self, coro: Any, slow: Callable[[float], None]) -> None:
        self.coro, self.slow = coro, slow

    def _held(self, began: float, queue: RunQueue) -> None:
        held = time.perf_counter() - began
        if held >= SLOW_STEP_SECONDS:
            held -= queue.since_mark()
            if held >= SLOW_STEP_SECONDS:
                self.slow(held)

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, limit, clock, queue = self.coro, SLOW_STEP_SECONDS, time.perf_counter, run_queue()
        value: Any = None
        error: BaseException | None = None
        while True:
            began = clock()
            queue.mark(began)
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:  # (the step ended: it awaited, returned or raised)
                if clock() - began >= limit:
                    self._held(began, queue)
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # (thrown in: a cancellation, a timeout's)
                value, error = None, exc


async def awaited_steps(returned: Any, timeout: float | None, slow: Callable[[float], None],
                        cut: Callable[[], Exception]) -> None:  # fmt: skip
    """Await what a callback returned, if it can be awaited: a coroutine step by step, each
    step timed (one that holds the loop goes to ``slow``: :class:`~goka.group.retries.Steps`),
    cut after ``timeout`` seconds (None: never) with the exception ``cut()`` makes (a
    ``TimeoutError`` of the callback's own goes on as it is)."""
    if inspect.iscoroutine(returned):
        returned = Steps(returned, slow)
    elif not inspect.isawaitable(returned):
        return
    if timeout is None:
        await returned
        return
    try:
        async with asyncio.timeout(timeout) as cutting:
            await returned
    except TimeoutError:
        if not cutting.expired():  # the callback's own
            raise
        raise cut() from None


def timed_out(group: str, partition: int, message: Message, key: str, callback: Any,
              timeout: float | None) -> CallbackTimeout:  # fmt: skip
    """The error of a callback cut by the group's ``timeout`` at ``message`` of ``key``."""
    where = f"{message[0]}/{partition}/{message[1]}"
    return CallbackTimeout(
        f"group {group!r}: callback {callable_name(callback)} took longer than its timeout of "
        f"{timeout:g} s for the record at {where} (key {key!r}): cut")  # fmt: skip


def warn_slow(group: str, partition: int, message: Message, key: str, callback: Any,
              took: float) -> None:  # fmt: skip
    """Warn, once per callback in this process, of a step of ``callback`` that held the
    loop ``took`` seconds at ``message`` of ``key``."""
    name = callable_name(callback)
    if name in _slow_warned:
        return
    _slow_warned.add(name)
    log.warning(
        "group %r: async callback %s ran %.3f s without awaiting, at key %r (%s/%s/%s): "
        "every record in flight waited meanwhile. A blocking call inside an async def "
        "(time.sleep, requests, a database driver without asyncio) holds the event loop: "
        "await an asyncio client, or make the callback a def (run on a thread pool). "
        "Warned once.", group, name, took, key, message[0], partition, message[1])  # fmt: skip


_slow_warned: set[str] = set()


def check_concurrency(group: str, concurrency: object) -> int:
    """``concurrency`` if it is a whole number of at least 1.

    Raises:
        GraphError: it is not.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise GraphError(f"group {group!r}: concurrency must be a whole number of at least 1, "
                         f"got {concurrency!r}")  # fmt: skip
    return concurrency


def check_awaited(graph: Any) -> None:
    """A group (a :class:`~goka.group.graph.GroupGraph`) with records in flight (concurrency
    above 1, async input or loop callbacks, a ``retry`` or a ``timeout``) keeps each session
    window readable for at least its gap after it closed (``retention`` >= ``gap``). A record
    in flight reads its key's sessions before the records released ahead of it have fired
    what their stream time made due; a session that expired earlier than its gap would then
    be joined by a record that one at a time would find it gone.

    Raises:
        GraphError: it does not.
    """
    short = [f"{n} (gap {e.spec.gap} ms, retention {e.retention} ms)"
             for n, e in graph.windows.items()
             if isinstance(e.spec, Session) and e.retention < e.spec.gap]  # fmt: skip
    if not short:
        return
    edges = [*graph.inputs.values(), *([graph.loop] if graph.loop else [])]
    found = [f"concurrency {graph.concurrency}"] if graph.concurrency > 1 else []
    found += [f"{n}={getattr(graph, n)!r}" for n in ("retry", "timeout")
              if getattr(graph, n) is not None]  # fmt: skip
    found += [f"async callback {callable_name(e.callback)} of {e.kind} edge {e.topic}"
              for e in edges if awaited(e.callback)]  # fmt: skip
    if found:
        raise GraphError(
            f"group {graph.group!r} runs records in flight ({'; '.join(found)}): its session "
            f"windows must stay readable for at least their gap after they close, got "
            f"{', '.join(short)} (set retention to the gap or more)")  # fmt: skip


def with_concurrency(graph: Any, concurrency: int) -> Any:
    """``graph`` (a :class:`~goka.group.graph.GroupGraph`) with another ``concurrency``
    (``goka processor run --concurrency``).

    Raises:
        GraphError: as :func:`~goka.group.graph.define_group` (rule 14).
    """
    changed = replace(graph, concurrency=check_concurrency(graph.group, concurrency))
    check_awaited(changed)
    return changed


def settle(future: asyncio.Future[Any], returned: Any, error: BaseException | None) -> None:
    """Give ``future`` what a thread's callback returned or raised (unless it is done)."""
    if future.done():
        return
    if error is None:
        future.set_result(returned)
    else:
        future.set_exception(error)


class Layer(dict):  # type: ignore[type-arg]
    """State a record changes, over the shared state it reads through (a plain callback that
    a timeout may cut: see :meth:`goka.group.concurrent._Call._on_thread`)."""

    __slots__ = ("under",)

    def __init__(self, under: dict[str, Any]) -> None:
        super().__init__()
        self.under = under

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else self.under.get(key, default)
