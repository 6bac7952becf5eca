"""A continuous partition's pending time rows (goka.time.pending_rows): what a batch changed is
read over the store until written; each commit seals a generation, written once its outputs
are acknowledged, and lets go of the rows no later generation changed. (That a batch's rows
taken at once are what replaying its changelog rows in order leaves is tested with engines:
tests/unit/test_written_windows.py.)"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from goka.storage import WriteBatch
from goka.storage.memory import MemoryStorage
from goka.time.pending_rows import PendingRows

TOPIC, TIMERS, GRACE = "g-window-minute", "g-timers", 5_000
ROWS = ["wu@1", "wu@2", "cu@1", "cu@2"]

batches = st.lists(st.dictionaries(st.sampled_from(ROWS), st.sampled_from([None, b"1", b"2"])),
                   min_size=1, max_size=6)  # fmt: skip


def seen(pending: PendingRows, store: MemoryStorage) -> dict[str, bytes]:
    """The section as the engine reads it: the store's rows with the pending on top."""
    view = pending.view(TOPIC)
    return {k: v for k in ROWS if (v := view.get(k)) is not None}


@settings(max_examples=200, deadline=None)
@given(batches, st.lists(st.booleans(), min_size=6, max_size=6), st.integers(0, 3))
def test_generations_written_in_order_read_as_the_batches_left_them(
    taken: list[dict[str, bytes | None]], seals: list[bool], acknowledged: int
) -> None:
    """Batches are taken; some commits seal; the first ``acknowledged`` sealed generations
    are written (in order). The engine reads what the batches left; the store holds what
    the written generations left; what is left pending is written by the next seals."""
    store = MemoryStorage("g-table")
    pending = PendingRows({TOPIC: store.section(TOPIC), TIMERS: store.section(TIMERS)},
                          {TOPIC: GRACE, TIMERS: None}, generations=True)  # fmt: skip
    left: dict[str, bytes | None] = {}  # the batches applied in order
    sealed: list[dict[str, dict[str, bytes | None]]] = []
    for batch, seal in zip(taken, seals, strict=False):
        pending.apply_windows({TOPIC: batch})
        left.update(batch)
        if seal:
            sealed.append(pending.seal())
    expected = {k: v for k, v in left.items() if v is not None}
    assert seen(pending, store) == expected
    done, waiting = sealed[:acknowledged], sealed[acknowledged:]
    for index, generation in enumerate(done):
        store.write(WriteBatch(sections=generation))
        pending.written(generation, [*done[index + 1 :], *waiting])
    written: dict[str, bytes | None] = {}
    for generation in done:
        written.update(generation[TOPIC])
    assert dict(store.section(TOPIC).items()) == {k: v for k, v in written.items() if v is not None}
    assert seen(pending, store) == expected  # the rows let go are read from the store
    for generation in [*waiting, pending.seal()]:  # the rest: the store ends as the batches
        store.write(WriteBatch(sections=generation))
    assert dict(store.section(TOPIC).items()) == expected
