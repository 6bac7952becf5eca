"""Records in flight across an engine's calls (goka.group.concurrent.Carried, Engine.carry):
what comes back is what one record at a time gives, in offset order, while a busy key holds
back only its own records' work, not the records given after it."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from goka.errors import ContextError, ProcessingError
from goka.group.carried import RECORD_OVERHEAD
from goka.group.context import Context
from goka.group.effects import EMIT, BatchResult, Message
from goka.group.engine import Engine

from .test_concurrency import _apply, _messages, _same, graph_of, msg, reference

BIG = 1 << 30


class Caller:
    """What a continuous epoch does with a carrying engine: gives it records, takes what came
    back, and keeps the state changes where the engine reads them (its store)."""

    def __init__(self, callback: Callable[..., Any], concurrency: int = 8,
                 on_error: str = "skip", bound: int = BIG, timeout: float | None = None) -> None:  # fmt: skip
        self.store: dict[str, bytes | None] = {}
        graph = dataclasses.replace(graph_of(callback, concurrency), timeout=timeout)
        self.engine = Engine(graph, 0, store=self.store.get, on_error=on_error)  # type: ignore[arg-type]
        self.bound = bound
        self.done = BatchResult([])

    def take(self, result: BatchResult) -> BatchResult:
        self.store.update(result.changes())
        self.done.effects += result.effects
        self.done.failed += result.failed
        self.done.consumed += result.consumed
        return result

    def carry(self, messages: list[Message]) -> BatchResult:
        return self.take(self.engine.carry(messages, self.bound))

    def until(self, condition: Callable[[], bool], seconds: float = 30.0) -> None:
        """Come back (with no records) until ``condition()``."""
        deadline = time.monotonic() + seconds
        while not condition():
            assert time.monotonic() < deadline, f"condition not met in time: {condition}"
            self.carry([])
            time.sleep(0.001)


@pytest.mark.parametrize(("seed", "kind"), [(1, "async"), (2, "async"), (3, "plain"),
                                            (4, "plain-timeout")])  # fmt: skip
@pytest.mark.parametrize("on_error", ["skip", "dead-letter"])
def test_records_given_in_many_calls_come_back_as_one_at_a_time_gives(seed: int, kind: str,
                                                                      on_error: str) -> None:  # fmt: skip
    """Async callbacks on the loop, plain ones on the pool's threads, and plain ones with a
    timeout on a thread each (their state changes laid on the key's once they return); a
    record in 17 has no value (ignored: it runs nothing, waits for nothing)."""
    rng = random.Random(seed)

    async def awaits(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(rng.random() / 500)  # (finished in another order, across calls)
        _apply(ctx, value)

    def blocks(ctx: Context[int], value: str) -> None:
        time.sleep(rng.random() / 500)
        _apply(ctx, value)

    messages = [m if m[1] % 17 != 5 else (*m[:3], None, *m[4:]) for m in _messages(seed)]
    caller = Caller(awaits if kind == "async" else blocks, concurrency=16, on_error=on_error,
                    timeout=30.0 if kind == "plain-timeout" else None)  # fmt: skip
    given = 0
    while given < len(messages):  # (a key's records span calls: its state read from the
        chunk = messages[given : given + rng.randint(1, 12)]  # cache, or the store once
        given += len(chunk)  # every record of it was given back)
        caller.carry(chunk)
    caller.take(caller.engine.drain(60))
    assert caller.done.consumed == len(messages)
    _same(caller.done, reference(messages, on_error))


def _gated(gate: threading.Event, ran: list[int]) -> Callable[..., Any]:
    """Records of key ``hot`` wait for ``gate``; every record notes its offset as it ends."""

    async def callback(ctx: Context[int], value: str) -> None:
        if ctx.key == "hot":
            while not gate.is_set():
                await asyncio.sleep(0.001)
        _apply(ctx, value)
        ran.append(int(value))

    return callback


def test_a_busy_key_holds_back_only_its_own_records_work_across_calls() -> None:
    gate, ran = threading.Event(), list[int]()
    caller = Caller(_gated(gate, ran), concurrency=4)
    caller.carry([msg(0, "hot"), msg(1, "a"), msg(2, "hot"), msg(4, "b")])
    caller.carry([msg(5, "a"), msg(6, "c"), msg(8, "d"), msg(9, "e"), msg(11, "a")])
    # the other keys' records given in both calls run, 4 at most at once, while record 0 waits
    caller.until(lambda: sorted(ran) == [1, 4, 5, 6, 8, 9, 11])
    assert caller.done.consumed == 0 and not caller.done.effects  # (released in offset order)
    gate.set()
    caller.until(lambda: caller.done.consumed == 9)
    assert [e[3] for e in caller.done.effects if e[0] == EMIT] == [
        b"0:0", b"1:0", b"2:1", b"4:0", b"5:1", b"6:0", b"8:0", b"9:0", b"11:2"]  # fmt: skip
    assert caller.engine.drain(1).consumed == 0


def test_a_call_waits_while_the_records_not_given_back_hold_more_than_the_bound() -> None:
    gate, ran = threading.Event(), list[int]()
    caller = Caller(_gated(gate, ran), concurrency=4, bound=3 * (RECORD_OVERHEAD + 3))
    caller.carry([msg(0, "hot"), msg(1, "a")])
    returned = threading.Event()

    def third() -> None:
        caller.carry([msg(2, "b"), msg(4, "c")])  # 4 records held: over the bound
        returned.set()

    thread = threading.Thread(target=third)
    thread.start()
    assert not returned.wait(0.3)  # (it waits for record 0, held back by the gate)
    assert sorted(ran) == [1, 2, 4]  # (its records run meanwhile)
    gate.set()
    thread.join(30)
    assert returned.is_set()
    caller.until(lambda: caller.done.consumed == 4)
    assert caller.engine.drain(1).consumed == 0


def test_a_failure_under_fail_is_raised_by_the_call_after_it_with_what_preceded_it() -> None:
    async def awaits(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)
        _apply(ctx, value)  # (record 3 fails)

    caller = Caller(awaits, on_error="fail")

    def run() -> None:
        caller.carry([msg(n, f"k{n % 2}") for n in range(3)])
        caller.carry([msg(3, "k1"), msg(4, "k0")])
        caller.until(lambda: False)

    with pytest.raises(ProcessingError) as raised:
        run()
    assert raised.value.offset == 3 and "record 3 fails" in str(raised.value)
    assert caller.engine._carried is None  # (the flight ended with the failure, cancelled)
    before = caller.done.consumed
    caller.carry([msg(4, "k0")])  # (the caller starts again from what it committed)
    caller.until(lambda: caller.done.consumed == before + 1)
    assert [e[3] for e in caller.done.effects if e[0] == EMIT][-1].startswith(b"4:")
    caller.engine.drain(1)


def test_a_callback_that_cancels_its_own_task_fails_its_record_and_the_flight_goes_on() -> None:
    async def cancels(ctx: Context[int], value: str) -> None:
        if value == "1":
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            await asyncio.sleep(0)
        _apply(ctx, value)

    caller = Caller(cancels)
    caller.carry([msg(0, "a"), msg(1, "b"), msg(2, "a")])
    caller.until(lambda: caller.done.consumed == 3)
    assert [e[3] for e in caller.done.effects if e[0] == EMIT] == [b"0:0", b"2:1"]
    assert "record 1's task was cancelled" in str(caller.done.failed[0][0])
    caller.engine.drain(1)


def test_a_drain_waits_for_the_first_record_not_given_back_then_cancels_the_rest() -> None:
    gates = {1: threading.Event(), 2: threading.Event()}  # (records 1 and 2 wait for theirs)
    ran, cancelled = list[int](), list[int]()

    async def callback(ctx: Context[int], value: str) -> None:
        try:
            while int(value) in gates and not gates[int(value)].is_set():
                await asyncio.sleep(0.001)
        except asyncio.CancelledError:
            cancelled.append(int(value))
            raise
        _apply(ctx, value)
        ran.append(int(value))

    caller = Caller(callback)
    caller.carry([msg(0, "a"), msg(1, "slow"), msg(2, "slower"), msg(4, "b")])
    caller.until(lambda: sorted(ran) == [0, 4])
    drained = threading.Thread(target=lambda: caller.take(caller.engine.drain(0.05, 30)))
    drained.start()
    drained.join(0.3)
    assert drained.is_alive()  # (past its time, it waits for record 1: the first not back,
    # up to 30 s more)
    gates[1].set()
    drained.join(30)
    assert caller.done.consumed == 2 and cancelled == [2]  # (records 2 and 4 read again)
    assert [e[3] for e in caller.done.effects if e[0] == EMIT] == [b"0:0", b"1:0"]
    gates[2].set()
    caller.carry([msg(2, "slower"), msg(4, "b")])  # (a new flight, from what was given back)
    caller.until(lambda: caller.done.consumed == 4)
    assert [e[3] for e in caller.done.effects if e[0] == EMIT] == [b"0:0", b"1:0", b"2:0",
                                                                   b"4:0"]  # fmt: skip
    assert caller.engine.drain(1).consumed == 0


def test_records_left_in_flight_go_on_in_the_engine_that_adopts_them() -> None:
    """An epoch ending hands its records in flight to the bridge of its process (a new engine
    over the same store): they are not cancelled, nor run again."""
    gate, ran = threading.Event(), list[int]()
    first = Caller(_gated(gate, ran))
    first.carry([msg(0, "hot"), msg(1, "a"), msg(2, "hot"), msg(4, "a")])
    first.until(lambda: sorted(ran) == [1, 4])
    carried = first.engine.detach()
    assert carried is not None and first.engine.drain(1).consumed == 0  # (it let go)
    second = Caller(_gated(gate, ran))
    second.store.update(first.store)
    second.engine.adopt(carried)
    gate.set()
    second.until(lambda: second.done.consumed == 4)
    assert [e[3] for e in second.done.effects if e[0] == EMIT] == [b"0:0", b"1:0", b"2:1",
                                                                   b"4:1"]  # fmt: skip
    assert sorted(ran) == [0, 1, 2, 4]  # (each once)
    assert second.engine.drain(1).consumed == 0


def test_a_drain_on_a_stop_waits_for_no_first_record() -> None:
    gate, ran = threading.Event(), list[int]()
    caller = Caller(_gated(gate, ran))
    caller.carry([msg(0, "hot"), msg(1, "a")])
    caller.until(lambda: ran == [1])
    assert caller.take(caller.engine.drain(0.01)).consumed == 0  # (record 0 is read again)
    gate.set()


def test_parked_records_are_cancelled_unless_adopted_in_time() -> None:
    """What an epoch leaves in flight for the next one of its process is cancelled when the
    next epoch of the group takes other partitions, or when none comes in time."""
    from collections import deque

    from goka.processing import parked
    from goka.processing.worker import Worker

    gate, ran, cancelled = threading.Event(), list[int](), list[int]()

    async def callback(ctx: Context[int], value: str) -> None:
        try:
            await _gated(gate, ran)(ctx, value)
        except asyncio.CancelledError:
            cancelled.append(int(value))
            raise

    worker = Worker(inbox=False)
    flights = []
    for partition in (0, 1, 2):
        caller = Caller(callback)
        caller.carry([msg(10 * partition, "hot")])
        carried = caller.engine.detach()
        assert carried is not None
        flights.append(parked.Parked(partition, carried, deque(), {"in": 10 * partition}))
    worker.carry((parked._PARKED, "conc"), flights)
    parked.cancel_parked(worker, "conc", keep={1, 2})  # (a task of partitions 1 and 2 begins)
    assert [p.partition for p in worker.take_carried((parked._PARKED, "conc"))] == [1, 2]
    assert flights[0]._claimed and not flights[1]._claimed
    assert flights[1].claim()  # (adopted: its expiry finds it taken)
    flights[1].expire(0.01)
    flights[2].expire(0.01)  # (none came for it)
    deadline = time.monotonic() + 30
    while sorted(cancelled) != [0, 20]:
        assert time.monotonic() < deadline, cancelled
        time.sleep(0.01)
    gate.set()
    flights[1].carried.abandon()


def test_a_group_that_keeps_time_or_runs_one_record_at_a_time_cannot_carry() -> None:
    engine = Engine(graph_of(_apply, 1), 0, store={}.get)  # type: ignore[arg-type]
    assert not engine.carries
    with pytest.raises(ContextError, match="records cannot stay in flight across calls"):
        engine.carry([msg(0, "a")], BIG)
