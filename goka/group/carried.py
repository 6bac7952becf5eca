"""Records of a partition in flight across an engine's calls: what a continuous epoch keeps
running from one read to the next (:class:`Carried`), and the engine's side of it
(:class:`Carrying`, mixed into :class:`~goka.group.engine.Engine`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from goka.errors import ContextError
from goka.group.callback_loop import Escaped, await_on_loop
from goka.group.concurrent import Records, _Call
from goka.group.edges import awaited
from goka.group.effects import BatchResult, Flight, Message
from goka.group.key_order import KeyOrder
from goka.keys import decode_text

if TYPE_CHECKING:
    from goka.group.context import Context
    from goka.group.graph import GroupGraph

__all__ = ["RECORD_OVERHEAD", "Carried", "Carrying"]


#: What a record admitted to a :class:`Carried` flight counts for beyond its key's and value's
#: bytes (its message, context and effects while it waits to be released).
RECORD_OVERHEAD = 1_024


class Carried(_Call):
    """Records of a partition in flight across an engine's calls (a group that keeps no
    time, whose caller comes back for more: a continuous epoch). A call admits records and
    returns at once with what was released since the last one, as long as the records
    admitted and not released hold at most ``bound`` bytes (their keys' and values' plus
    :data:`RECORD_OVERHEAD` each; else it waits for releases): the records run on the
    callback loop meanwhile, a key's next record starting as soon as its last one finished.
    A busy key then holds back only its own records, not the records after it in the next
    reads; their effects are still released in offset order, so what the caller commits is
    what it was given back, and a crash replays only what was never released.

    Every method but :meth:`call`, :meth:`drain` and :meth:`abandon` runs on the callback
    loop, which owns the flight; the state cache (the engine's, kept across calls) keeps the
    keys with records not released (those without are dropped as their releases are taken:
    the caller has their last values then).
    """

    def __init__(self, engine: Records, bound: int) -> None:
        self.engine, self.bound, self.timed = engine, bound, None
        self.result = BatchResult([])  # (what the policy skipped since the last call)
        self.messages: dict[int, Message] = {}  # type: ignore[assignment]
        self.keys: dict[int, Any] = {}  # type: ignore[assignment]
        self.order = KeyOrder(engine.concurrency)
        self.flight = Flight(waited={})
        self.awaits = {topic: awaited(c) for topic, (_, c) in engine.routes.items()}
        self.contexts = {}
        self.out = []  # released effects since the last call
        self.count = 0  # records released since the last call
        self.bytes = 0  # held by the records admitted, not released
        self.sizes: dict[int, int] = {}
        self.ignored: set[int] = set()  # records that run no callback (nil values ignored)
        self.holding: dict[Any, int] = {}  # each key's records admitted, not released
        self.error: BaseException | None = None
        self.pump: asyncio.Task[None] | None = None
        self.wake: asyncio.Future[None] | None = None
        self.changed: asyncio.Event | None = None
        self._open()

    def call(self, messages: Sequence[Message]) -> BatchResult:
        """Admit ``messages`` (the partition's next records, in offset order); what was
        released since the last call (``consumed``: how many records, the first ones not
        given back yet).

        Raises:
            ProcessingError: as :meth:`Engine.process <goka.group.engine.Engine.process>`.
        """
        return await_on_loop(self._admit(messages))  # type: ignore[no-any-return]

    def drain(self, seconds: float, first: float = 0.0) -> BatchResult:
        """Wait up to ``seconds`` for every record admitted to be released, and up to
        ``first`` more for the first one not released yet (so that each drain moves on: a
        record longer than ``seconds`` is not cut at every one), then end the flight: the
        records not released by then are cancelled (the caller reads them again from what it
        committed). What was released since the last call.

        Raises:
            ProcessingError: as :meth:`call`.
        """
        return await_on_loop(self._drain(seconds, first))  # type: ignore[no-any-return]

    def rebind(self, engine: Records, rebind: Callable[[Any], None]) -> None:
        """Go on for another engine (:meth:`Carrying.adopt`): the records started from now on
        take its context, ``rebind(context)`` the contexts of those admitted already."""
        await_on_loop(self._rebind(engine, rebind))

    async def _rebind(self, engine: Records, rebind: Callable[[Any], None]) -> None:
        self.engine = engine  # (on the loop: no record starts or settles meanwhile)
        for ctx in self.contexts.values():
            rebind(ctx)

    def abandon(self) -> None:
        """End the flight without waiting: every record not released is cancelled."""
        if self.pump is not None:
            await_on_loop(self._stop())

    @property
    def pending(self) -> int:
        """How many records are admitted and not released."""
        return self.order.pending

    async def _admit(self, messages: Sequence[Message]) -> BatchResult:
        self._check()
        if self.pump is None:
            self.changed = asyncio.Event()
            self.pump = asyncio.create_task(self._pumped())
        nil, order, holding = self.engine.nil_handling, self.order, self.holding
        for message in messages:
            raw_key, value = message[2], message[3]
            key: Any = decode_text(raw_key) if raw_key is not None else ""
            if value is None and nil == "ignore":  # (runs nothing, waits for nothing)
                key = ("ignored", message[0], message[1])
            elif key in holding:
                waited = self.flight.waited
                waited[key] = waited.get(key, 0) + 1
            number = order.admit(key)
            holding[key] = holding.get(key, 0) + 1
            if isinstance(key, tuple):
                self.ignored.add(number)
            self.messages[number], self.keys[number] = message, key
            size = RECORD_OVERHEAD + len(raw_key or b"") + len(value or b"")
            self.sizes[number] = size
            self.bytes += size
        self._start()
        self._wake()
        while self.bytes > self.bound and self.error is None:  # (the partition stops reading)
            await self._changed()
        self._check()
        return self._take()

    async def _drain(self, seconds: float, first: float) -> BatchResult:
        order, head = self.order, self.order.released
        try:
            try:
                async with asyncio.timeout(seconds):
                    while order.pending and self.error is None:
                        await self._changed()
            except TimeoutError:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(first):
                        while order.released == head and self.error is None:
                            await self._changed()
            self._check()
            return self._take()
        finally:
            await self._stop()

    async def _stop(self) -> None:
        if self.pump is not None:
            self.pump.cancel()
            await asyncio.gather(self.pump, return_exceptions=True)
        await self._close(wait=False)  # (a plain callback on the pool cannot be stopped: it
        # ends on its own, in a cache and effects no longer read)

    def _check(self) -> None:
        """Raise what ended the flight (a failure under the policy), if anything did."""
        if self.error is not None:
            raise self.error

    def _take(self) -> BatchResult:
        """What was released since the last call (and the keys it leaves idle forgotten)."""
        effects, self.out = self.out, []
        result = BatchResult(effects, failed=self.result.failed, processed=self.count,
                             consumed=self.count)  # fmt: skip
        result.flight, self.flight = self.flight, Flight(waited={})
        self.result.failed, self.count = [], 0
        cache, holding = self.engine.cache, self.holding
        for key in [k for k in list(cache) if k not in holding]:  # (one copy: callbacks on
            cache.pop(key, None)  # the pool's threads may add keys meanwhile)
        return result

    async def _pumped(self) -> None:
        """Run the records as they may start, release them as they may be, until cancelled
        or a failure ends the flight (kept in :attr:`error`, the records cancelled)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._start()
                self.wake = loop.create_future()
                done, _ = await asyncio.wait([*self.running, self.wake],
                                             return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                tasks = {t for t in done if t is not self.wake}
                if tasks:
                    await self._settle(tasks)  # type: ignore[arg-type]
                    self._notify()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # (the policy's ProcessingError, a callback's escape)
            self.error = exc.inner if isinstance(exc, Escaped) else exc
            self._notify()
            await self._close(wait=False)

    def _wake(self) -> None:
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)

    def _notify(self) -> None:
        assert self.changed is not None
        self.changed.set()
        self.changed = asyncio.Event()

    async def _changed(self) -> None:
        assert self.changed is not None
        await self.changed.wait()

    def _released(self, number: int) -> None:
        self.count += 1
        self.bytes -= self.sizes.pop(number)
        key = self.keys.pop(number)
        del self.messages[number]
        self.ignored.discard(number)
        left = self.holding[key] - 1
        if left:
            self.holding[key] = left
        else:
            del self.holding[key]

    async def _tries(self, number: int, pool: ThreadPoolExecutor | None) -> None:
        if number in self.ignored:
            return
        await super()._tries(number, pool)


class Carrying:
    """The engine's records in flight across calls (mixed into
    :class:`~goka.group.engine.Engine`, which holds the attributes)."""

    graph: GroupGraph
    context: Context[Any]
    cache: dict[str, Any]
    effects: list[Any]
    time: Any
    _concurrent: bool
    _carried: Carried | None

    def _records(self) -> Records:
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError

    @property
    def carries(self) -> bool:
        """May records stay in flight from one call to the next (:meth:`carry`)? In a group
        with records in flight (concurrency, async callbacks, retries or a timeout) that keeps
        no time."""
        return self._concurrent and self.time is None

    def carry(self, messages: Sequence[Message], bound: int) -> BatchResult:
        """Admit ``messages`` (the records after those given before, in offset order) to the
        records in flight across calls, and return at once what was released since the last
        call (``consumed``: how many of the records given, the first ones not returned yet):
        see :class:`~goka.group.concurrent.Carried` (``bound``: its bytes). The caller
        comes back for the rest (:meth:`carry` with no records, or :meth:`drain`).

        Raises:
            ContextError: the group cannot (:attr:`carries`).
            ProcessingError: as :meth:`process`, for a record given to this call or before.
        """
        if self._carried is None:
            if not self.carries:
                raise ContextError(
                    f"group {self.graph.group!r}: records cannot stay in flight "
                    "across calls (it keeps time, or runs one record at a time)"
                )
            self._carried = Carried(self._records(), bound)
        try:
            return self._carried.call(messages)
        except BaseException:
            self.abandon()
            raise

    def drain(self, seconds: float, first: float = 0.0) -> BatchResult:
        """End the records in flight across calls: wait up to ``seconds`` for them to be
        released (and up to ``first`` more for the first one not released) and return what
        was since the last call; those not released by then are cancelled (the caller gives
        them again, from where it committed).

        Raises:
            ProcessingError: as :meth:`carry`.
        """
        carried, self._carried = self._carried, None
        if carried is None:
            return BatchResult(self.effects)
        try:
            return carried.drain(seconds, first)
        finally:
            self._reset()

    def detach(self) -> Carried | None:
        """Let go of the records in flight across calls, still running, for another engine
        of the group's partition to :meth:`adopt` (the next epoch or bridge of this process):
        this engine starts afresh."""
        carried, self._carried = self._carried, None
        if carried is not None:
            self._reset()
        return carried

    def adopt(self, carried: Carried) -> None:
        """Go on with the records in flight across calls that another engine of the group's
        partition let go of (:meth:`detach`): their state cache, and their contexts read
        this engine's store and tables from now on."""
        self.abandon()
        self.cache = carried.engine.cache
        self.context._bind(self.cache, self.effects)
        own = self.context

        def rebind(ctx: Any) -> None:
            ctx._store_get, ctx._read_table = own._store_get, own._read_table

        carried.rebind(self._records(), rebind)
        self._carried = carried

    def abandon(self) -> None:
        """End the records in flight across calls without waiting (they are cancelled)."""
        carried, self._carried = self._carried, None
        if carried is not None:
            carried.abandon()
            self._reset()
