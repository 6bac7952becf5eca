"""The rows a batch's windows leave in the partition's pending rows (goka.pending_rows): taken
at once from the batch's last values, they amount to what applying each window changelog row
in order leaves, close index rows included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from goka.pending_rows import PendingRows
from goka.storage import WriteBatch
from goka.storage.memory import MemoryStorage
from goka.timekeeping import composite, window_index

TOPIC, GRACE = "g-window-minute", 5_000
#: Three windows of two keys (ends 60 s and 120 s apart).
WINDOWS = [composite(k, s, s + 60_000) for k in ("u", "w") for s in (0, 60_000)][:3]

operations = st.lists(st.tuples(st.sampled_from(WINDOWS), st.sampled_from([None, b"1", b"2"])),
                      max_size=12)  # fmt: skip


def replayed(section: dict[str, bytes], rows: list[tuple[str, bytes | None]]) -> dict[str, bytes]:
    """``section`` after each window changelog row in order, with its close index row (as a
    restore replays them: goka.timekeeping.window_index)."""
    section = dict(section)
    for key, value in rows:
        index = window_index(key, value, GRACE, existed=f"w{key}" in section)
        for row, data in [(f"w{key}", value), *([index] if index is not None else [])]:
            if data is None:
                section.pop(row, None)
            else:
                section[row] = data
    return section


def pending_over(committed: dict[str, bytes]) -> tuple[PendingRows, MemoryStorage]:
    store = MemoryStorage("g-table")
    store.write(WriteBatch(sections={TOPIC: dict(replayed({}, list(committed.items())))}))
    return PendingRows({TOPIC: store.section(TOPIC)}, {TOPIC: GRACE}, generations=True), store


def seen(pending: PendingRows, store: MemoryStorage) -> dict[str, bytes]:
    """The section as the next batch reads it: the store's rows with the pending on top."""
    rows = dict(store.section(TOPIC).items())
    for key, value in pending.rows[TOPIC].items():
        if value is None:
            rows.pop(key, None)
        else:
            rows[key] = value
    return rows


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(WINDOWS), st.sampled_from([b"0", b"9"])), operations)
def test_a_batchs_last_values_leave_what_its_rows_applied_in_order_leave(
    committed: dict[str, bytes], rows: list[tuple[str, bytes | None]]
) -> None:
    pending, store = pending_over(committed)
    before = dict(store.section(TOPIC).items())
    pending.apply_windows({TOPIC: {"w" + key: value for key, value in rows}})
    assert seen(pending, store) == replayed(before, rows)
    written = pending.seal()[TOPIC]  # what the commit writes: the same rows, nothing else
    assert written == pending.rows[TOPIC]
