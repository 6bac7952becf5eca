"""Damaged LevelDB stores heal themselves: for every kind of damage a disk or a crash can do
to a view's store (bits flipped in a table file, a truncated table file or log, a deleted
table file, a garbage or missing CURRENT or MANIFEST, an empty directory), no read returns a
wrong value or leaves a key out; the view says it is not ready while it rebuilds from the
table topic, and serves the exact table again without anyone acting. Each case reports how it
went and the seconds until the exact table was served again (``-s`` shows them)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from goka import BytesCodec, TopicManager
from goka.storage import LevelDBStorage, WriteBatch
from goka.view import View, ViewNotReadyError, ViewState

from ..helpers import produce
from .damage import DAMAGE

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

KEYS = 20_000
EXPECTED = {f"key-{i:05}": (b"value-%05d-" % i) * 8 for i in range(KEYS)}


@pytest.fixture(scope="module")
def table(brokers: str) -> str:
    name = "damaged-stores-table"
    TopicManager(brokers).ensure_table_exists(name, 2)
    produce(brokers, name, BytesCodec(), EXPECTED.items())
    return name


@pytest.fixture(scope="module")
def pristine(brokers: str, table: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A view's store of the whole table, with its values in table files, the last 2,000
    written again into the log (as a view that ran on would have them)."""
    path = tmp_path_factory.mktemp("pristine") / "store"
    with View(brokers, table, BytesCodec(), path=path) as view:
        view.wait_recovered(60)
    with LevelDBStorage(path, table) as storage:
        storage.flush()
        storage.write(WriteBatch(values=dict(list(EXPECTED.items())[-2_000:])))
    return path


def _read_everything(view: View[bytes]) -> dict[str, bytes] | None:
    """Every key by scan and by get; None if a read said the view is not ready. A value
    returned must be the right one and no key may be missing."""
    try:
        scanned = dict(view.items_raw())
        for key in list(EXPECTED)[::97]:
            assert view.get_raw(key) == EXPECTED[key], f"wrong value for {key}"
    except ViewNotReadyError:
        return None
    return scanned


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_view_store_is_never_read_wrong_and_heals(
    brokers: str, table: str, pristine: Path, tmp_path: Path, damage: str
) -> None:
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    DAMAGE[damage](store)
    states: list[ViewState] = []
    started = time.monotonic()
    view = View(brokers, table, BytesCodec(), path=store,
                on_state_change=lambda old, new: states.append(new))  # fmt: skip
    not_ready = 0
    try:
        view.start()
        while time.monotonic() - started < 120:
            view.wait_recovered(60)
            scanned = _read_everything(view)
            if scanned is not None:
                missing = len(EXPECTED.keys() - scanned.keys())
                wrong = sum(scanned[k] != v for k, v in EXPECTED.items() if k in scanned)
                assert (missing, wrong, len(scanned)) == (0, 0, KEYS)
                break
            not_ready += 1
            assert not view.recovered or view.state is ViewState.RUNNING
        else:
            pytest.fail(f"{damage}: not serving the exact table after 120s")
        seconds = time.monotonic() - started
    finally:
        view.close()
    aside = sorted(p.name for p in store.parent.glob("store.damaged-*"))
    how = "moved aside and rebuilt" if aside else "no damage seen by any read"
    print(f"\n{damage}: {how}; reads refused {not_ready} times; exact after {seconds:.2f}s; "
          f"states {[s.value for s in states]}")  # fmt: skip
    if aside:
        assert ViewState.REBUILDING in states  # it said so while rebuilding
