"""goka._speedups' WindowUpdater (goka/_window_update.c) against the Python updater it replaces
(goka.time.window_update): the same records through two engines, one with each, every call's
effects, window rows and failures compared; and the windows' counts against a count made here."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from goka import (
    Context,
    Hopping,
    Int64Codec,
    JsonCodec,
    StringCodec,
    Tumbling,
    define_group,
    persist,
    window,
)
from goka import input as input_edge
from goka._accel import speedups
from goka.errors import CodecError, ProcessingError
from goka.group.effects import TIMER, WINDOW
from goka.group.engine import Engine
from goka.storage.base import WriteBatch
from goka.storage.memory import MemoryStorage
from goka.time import window_update
from goka.time.pending_rows import section_graces
from goka.time.rows import decode_composite, section_rows

pytestmark = pytest.mark.skipif(speedups is None, reason="goka._speedups is not built")

MINUTE = 60_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % (60 * MINUTE)
BIG = 10**18  # a count past this has 19 digits: Int64Codec's Python methods read and write it


def changes(ctx: Context[int], text: str) -> None:
    """The record says how its windows change: ``+n`` adds, ``big`` adds 10**18 (past the
    digits the C path reads), ``neg`` subtracts 7 (a minus sign), ``bool`` sets True (an
    encode error), ``raise`` fails in the change, ``after`` fails after changing."""
    op = text.split(":")[0]
    if op == "raise":

        def change(n: Any) -> Any:
            raise ValueError("a change that fails")
    elif op == "bool":

        def change(n: Any) -> Any:
            return True
    else:
        step = {"big": BIG, "neg": -7}.get(op, 1)

        def change(n: Any) -> Any:
            return (n or 0) + step

    for name in ("hop", "minute"):
        ctx.window(name).update(change)
    if op == "after":
        raise RuntimeError("a record that fails after its updates")


def graph(codec: Any) -> Any:
    return define_group(
        "wu", input_edge("clicks", StringCodec(), changes),
        window("hop", Hopping(5 * MINUTE, MINUTE), codec, grace=30_000),
        window("minute", Tumbling(minutes=1), codec), persist(Int64Codec()),
    )  # fmt: skip


def records(seed: int, count: int, ops: list[str]) -> list[Any]:
    """Dense clicks over a few keys, times mostly rising (some a little out of order, some
    late), each with an op of ``ops`` now and then."""
    rng = random.Random(seed)
    at, messages = T0, []
    for offset in range(count):
        at += rng.randrange(0, 4_000)
        jitter = -rng.randrange(0, 200_000) if rng.random() < 0.05 else 0
        op = rng.choice(ops) if rng.random() < 0.1 else "+1"
        key = f"k{rng.randrange(6)}".encode()
        messages.append(("clicks", offset, key, f"{op}:{offset}".encode(), at + jitter, None))
    return messages


class Run:
    """An engine over memory sections, committing each call's rows as a runtime does."""

    def __init__(self, codec: Any, *, on_error: str, whole_commits: bool) -> None:
        self.graph = graph(codec)
        self.timers = MemoryStorage("timers")
        self.windows = {n: MemoryStorage(n) for n in self.graph.windows}
        self.graces = section_graces(self.graph)
        self.engine = Engine(self.graph, 0, store=lambda k: None, on_error=on_error,  # type: ignore[arg-type]
                             timers=self.timers, windows=self.windows, clock=lambda: T0,
                             whole_commits=whole_commits, pause_gc=False)  # fmt: skip

    def call(self, messages: list[Any]) -> tuple[list[Any], list[Any], dict[str, Any]]:
        result = self.engine.process(messages)
        for kind, topic, key, data, _, _ in result.effects:
            if kind == TIMER:
                self.timers.write(WriteBatch(values=section_rows(
                    self.timers.get, key, data, grace=self.graces[topic])))  # fmt: skip
        for name, section in self.windows.items():
            rows = result.windows.get(self.graph.group.window(name))
            if rows:
                section.write(WriteBatch(values=dict(rows)))
        effects = [(e[0], e[1], e[2], e[3], e[4], e[5][1]) for e in result.effects]
        failed = [(m[1], type(err.__cause__ or err).__name__) for err, m in result.failed]
        return effects, failed, {n: dict(w) for n, w in result.windows.items()}


def both(monkeypatch: pytest.MonkeyPatch, messages: list[Any], chunks: list[int],
         **settings: Any) -> list[Any]:  # fmt: skip
    """Every call's (effects, failures, window rows) with the C updater; asserted equal to the
    Python updater's."""
    outcomes = []
    for native in (speedups, None):
        monkeypatch.setattr(window_update, "speedups", native)
        run, calls, at = Run(**settings), [], 0
        for size in chunks:
            calls.append(run.call(messages[at : at + size]))
            at += size
        outcomes.append(calls)
    monkeypatch.setattr(window_update, "speedups", speedups)
    native_calls, python_calls = outcomes
    for number, (c, p) in enumerate(zip(native_calls, python_calls, strict=True)):
        assert c == p, f"call {number}: the C updater and the Python one differ"
    return native_calls


def chunked(seed: int, total: int) -> list[int]:
    rng, sizes = random.Random(seed), []
    while total > 0:
        sizes.append(min(total, rng.choice([1, 7, 50, 400])))
        total -= sizes[-1]
    return sizes


@pytest.mark.parametrize("whole_commits", [False, True])
@pytest.mark.parametrize("codec", [Int64Codec(), JsonCodec()], ids=["int64", "json"])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_c_updater_does_what_the_python_one_does(
    monkeypatch: pytest.MonkeyPatch, seed: int, codec: Any, whole_commits: bool
) -> None:
    messages = records(seed, 3_000, ["big", "neg", "+1"])
    calls = both(monkeypatch, messages, chunked(seed, len(messages)), codec=codec,
                 on_error="fail", whole_commits=whole_commits)  # fmt: skip
    rows = [e for effects, _, _ in calls for e in effects if e[0] == WINDOW]
    assert len(rows) > 100 and any(b"-" in e[3] for e in rows if e[3] is not None)
    assert any(len(e[3]) > 18 for e in rows if e[3] is not None)  # past the C digits


@pytest.mark.parametrize("whole_commits", [False, True])
@pytest.mark.parametrize("codec", [Int64Codec(), JsonCodec()], ids=["int64", "json"])
def test_failed_records_are_undone_alike(
    monkeypatch: pytest.MonkeyPatch, codec: Any, whole_commits: bool
) -> None:
    messages = records(3, 3_000, ["raise", "after", "bool", "big", "neg"])
    calls = both(monkeypatch, messages, chunked(3, len(messages)), codec=codec,
                 on_error="skip", whole_commits=whole_commits)  # fmt: skip
    kinds = Counter(kind for _, failed, _ in calls for _, kind in failed)
    assert kinds["ValueError"] > 10 and kinds["RuntimeError"] > 10
    if isinstance(codec, Int64Codec):
        assert kinds["CodecError"] > 10


def test_a_failed_encode_fails_the_record_with_the_codecs_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = Run(Int64Codec(), on_error="fail", whole_commits=False)
    run.call([("clicks", 0, b"k", b"+1:0", T0, None)])  # (kept: the next takes the C path)
    with pytest.raises(ProcessingError) as failed:
        run.call([("clicks", 1, b"k", b"bool:1", T0 + 1, None)])
    assert isinstance(failed.value.__cause__, CodecError), failed.value


@pytest.mark.parametrize("whole_commits", [False, True])
def test_in_order_counts_equal_a_count_made_here(whole_commits: bool) -> None:
    """Times rising, none late: every window of every record counts it once."""
    rng = random.Random(5)
    messages, at = [], T0
    for offset in range(20_000):
        at += rng.randrange(0, 300)
        messages.append(("clicks", offset, f"k{rng.randrange(40)}".encode(), b"+1:", at, None))
    expected: Counter[tuple[str, str, int, int]] = Counter()
    for _, _, key, _, t, _ in messages:
        first = t - t % MINUTE
        expected[("minute", key.decode(), first, first + MINUTE)] += 1
        for start in range(first - 4 * MINUTE, first + 1, MINUTE):
            expected[("hop", key.decode(), start, start + 5 * MINUTE)] += 1
    run = Run(Int64Codec(), on_error="fail", whole_commits=whole_commits)
    tables: dict[str, dict[str, bytes]] = {}
    for begin in range(0, len(messages), 2_500):
        effects, _, _ = run.call(messages[begin : begin + 2_500])
        for kind, topic, key, data, _, _ in effects:
            if kind == WINDOW:
                tables.setdefault(topic, {})[key] = data
    counted = {
        (topic.rsplit("-", 1)[1], *decode_composite(row)): int(data)
        for topic, rows in tables.items() for row, data in rows.items()
    }  # fmt: skip
    assert counted == dict(expected)
