"""Several records of a partition in flight: a group's ``concurrency`` and async callbacks.

A callback that waits on the network (an HTTP service, a database) holds its partition back
when records run one at a time. With ``define_group(..., concurrency=N)`` the engine runs up
to N records of the messages it is given at once, as :class:`~goka.group.key_order.KeyOrder`
allows: a record starts once every earlier record of its key has finished (so it sees their
state), a busy key holds back only its own records. ``async def`` callbacks are awaited on an
event loop of the call; plain ones run on a pool of N threads (at concurrency 1, in the
loop's thread).

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

Not yet: groups that keep time (windows, timers, a TTL) or read event times run one record
at a time with plain callbacks (:func:`~goka.group.graph.define_group` says so).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from goka.errors import GraphError
from goka.group.edges import callable_name
from goka.group.effects import MISSING, NOT_SAVED, BatchResult, Message
from goka.group.key_order import KeyOrder
from goka.keys import decode_text

__all__ = ["Records", "check_awaited", "check_concurrency", "run_concurrently"]


def check_concurrency(group: str, concurrency: object) -> int:
    """``concurrency`` if it is a whole number of at least 1.

    Raises:
        GraphError: it is not.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise GraphError(f"group {group!r}: concurrency must be a whole number of at least 1, "
                         f"got {concurrency!r}")  # fmt: skip
    return concurrency


def check_awaited(group: str, concurrency: int, timed: bool, custom: Sequence[str],
                  callbacks: Sequence[tuple[str, str, Any]]) -> None:  # fmt: skip
    """A group that keeps time (``timed``) or reads event times (its inputs ``custom``) has
    plain callbacks (``(edge kind, topic, callback)``) and concurrency 1: key-ordered
    concurrency does not order its timers and windows yet.

    Raises:
        GraphError: it has not.
    """
    if not (timed or custom):
        return
    what = "keeps time (windows, timers or a TTL)" if timed else (
        f"reads event times (inputs {list(custom)})")  # fmt: skip
    if concurrency > 1:
        raise GraphError(f"group {group!r} {what}: concurrency above 1 is not available "
                         f"for it yet, got {concurrency}")  # fmt: skip
    for kind, topic, callback in callbacks:
        if inspect.iscoroutinefunction(callback):
            raise GraphError(f"group {group!r} {what}: callback {callable_name(callback)} of "
                             f"{kind} edge {topic} is async; use a def (async callbacks are "
                             "not available for such a group yet)")  # fmt: skip


@dataclass(frozen=True)
class Records:
    """What :func:`run_concurrently` uses of an engine: its group's ``concurrency``, its
    context (copied for each record), the batch's state ``cache`` and ``effects``, its
    ``routes`` (``(decode, callback)`` by topic), its ``nil_handling`` and its ``failed``
    (a record's failure under the policy: ``failed(exc, message, mark, result, context=)``)."""

    concurrency: int
    context: Any
    cache: dict[str, Any]
    effects: list[Any]
    routes: Mapping[str, tuple[Callable[[bytes], Any], Callable[..., Any]]]
    nil_handling: str
    failed: Callable[..., None]


def run_concurrently(engine: Records, messages: Sequence[Message], result: BatchResult) -> None:
    """Run ``messages`` through ``engine``'s callbacks, up to its ``concurrency`` at once
    (see the module docstring); their effects go to ``engine.effects`` in offset order, the
    records skipped to ``result.failed``.

    Raises:
        ProcessingError: as :meth:`Engine.process <goka.group.engine.Engine.process>`.
    """
    work = _Call(engine, messages, result)
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # (the common case: no loop runs in this thread)
        asyncio.run(work.run())
        return
    # called from a coroutine (a user's async test driving the tester): a thread of its own
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(work.run())
        except BaseException as exc:  # (raised in the caller's thread below)
            failure.append(exc)

    thread = threading.Thread(target=run, name="goka-concurrent")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


class _Call:
    """One call's records in flight (see :func:`run_concurrently`)."""

    def __init__(self, engine: Records, messages: Sequence[Message], result: BatchResult) -> None:
        self.engine, self.result = engine, result
        nil = engine.nil_handling
        self.messages = [m for m in messages if m[3] is not None or nil != "ignore"]
        self.order = KeyOrder(engine.concurrency)
        for message in self.messages:
            self.order.admit(decode_text(message[2]) if message[2] is not None else "")

    async def run(self) -> None:
        engine, order = self.engine, self.order
        plain = engine.concurrency > 1 and not all(
            inspect.iscoroutinefunction(c) for _, c in engine.routes.values()
        )  # fmt: skip
        pool = ThreadPoolExecutor(engine.concurrency, "goka-callback") if plain else None
        running: dict[asyncio.Task[None], int] = {}
        contexts: dict[int, Any] = {}
        failures: dict[int, Exception] = {}
        try:
            while not order.idle:
                for number in order.start():
                    ctx = contexts[number] = self._context(self.messages[number])
                    task = asyncio.create_task(self._call(ctx, self.messages[number], pool))
                    running[task] = number
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    number = running.pop(task)
                    failure = task.exception()
                    if failure is not None:
                        if not isinstance(failure, Exception):
                            raise failure
                        failures[number] = failure
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
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def _context(self, message: Message) -> Any:
        """A context of the record's own: its message, key and effects (state is shared:
        a key has one record in flight)."""
        ctx = copy.copy(self.engine.context)
        ctx._bind(self.engine.cache, [])
        ctx._message, ctx._saved = message, NOT_SAVED
        ctx.key = decode_text(message[2]) if message[2] is not None else ""
        return ctx

    async def _call(self, ctx: Any, message: Message, pool: ThreadPoolExecutor | None) -> None:
        decode, callback = self.engine.routes[message[0]]
        raw = message[3]
        nil = self.engine.nil_handling
        value = decode(raw) if raw is not None else (None if nil == "process" else decode(b""))
        if inspect.iscoroutinefunction(callback):
            await callback(ctx, value)
        elif pool is not None:
            await asyncio.get_running_loop().run_in_executor(pool, callback, ctx, value)
        else:
            callback(ctx, value)

    def _undo(self, ctx: Any) -> None:
        """Restore the state a failed record changed (the skip and dead-letter policies), once:
        its key's next record may change it after this."""
        saved, cache = ctx._saved, self.engine.cache
        if saved is MISSING:
            cache.pop(ctx.key, None)
        elif saved is not NOT_SAVED:
            cache[ctx.key] = saved
        ctx._saved = NOT_SAVED
