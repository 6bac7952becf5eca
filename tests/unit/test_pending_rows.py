"""The rows a batch's windows leave in the partition's pending rows (goka.pending_rows): taken
at once from the batch's last values, they amount to what applying each window changelog row
in order leaves, close index rows included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from goka.pending_rows import PendingRows
from goka.storage import WriteBatch
from goka.storage.memory import MemoryStorage
from goka.timekeeping import composite

TOPIC, GRACE = "g-window-minute", 5_000
#: Three windows of two keys (ends 60 s and 120 s apart).
WINDOWS = [composite(k, s, s + 60_000) for k in ("u", "w") for s in (0, 60_000)][:3]

operations = st.lists(st.tuples(st.sampled_from(WINDOWS), st.sampled_from([None, b"1", b"2"])),
                      max_size=12)  # fmt: skip


def pending_over(committed: dict[str, bytes | None]) -> tuple[PendingRows, MemoryStorage]:
    store = MemoryStorage("g-table")
    setup = PendingRows({TOPIC: store.section(TOPIC)}, {TOPIC: GRACE})
    for key, value in committed.items():  # what earlier commits left, index rows and all
        setup.apply(TOPIC, key, value)
    store.write(WriteBatch(sections={TOPIC: dict(setup.rows[TOPIC])}))
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
    one_by_one, store = pending_over(committed)
    for key, value in rows:
        one_by_one.apply(TOPIC, key, value)
    at_once, same = pending_over(committed)
    at_once.apply_windows({TOPIC: {"w" + key: value for key, value in rows}})
    assert seen(at_once, same) == seen(one_by_one, store)
    written = at_once.seal()[TOPIC]  # what the commit writes: the same rows, nothing else
    assert written == at_once.rows[TOPIC]
