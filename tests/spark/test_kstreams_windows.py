"""goka-py's windows beside Kafka Streams' on the same input (tests/spark/peer_windows.py):
out-of-order and late records in several partitions, tumbling and hopping windows with grace,
final results (Kafka Streams: ``suppress(untilWindowCloses)``, no cache). Each window's final
value, the windows closed by the end of the input, and the records dropped as late are the
same in both, and the same as the reference computed from the input alone.

No difference by design was found on this input: both keep stream time per input partition,
close a window when the stream time reaches its end plus grace, and at the end of the input
leave open the windows it has not closed (docs/time.md, "Beside Kafka Streams")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from goka import Emitter, StringCodec
from goka.time.rows import WINDOW_START
from goka.topic_manager import TopicManager

from . import peer_windows as pw
from .timed import topic_rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 3
N = 3_000


@pytest.fixture(scope="module")
def kstreams() -> Any:
    """The Kafka Streams peer (bench/peers), built once into the cache."""
    from bench.peers import kstreams

    try:
        kstreams.build()
    except kstreams.PeerUnavailable as missing:
        pytest.skip(str(missing))
    return kstreams


def _read(
    brokers: str, topic: str
) -> dict[int, list[tuple[int, bytes, bytes | None, int, dict[str, bytes]]]]:
    """Each partition's records: (offset, key, value, timestamp, headers)."""
    return {p: [(r[1], bytes(r[2] or b""), r[3], r[4], dict(r[5] or [])) for r in rows]
            for p, rows in topic_rows(brokers, topic, PARTITIONS).items()}  # fmt: skip


@pytest.mark.parametrize("name", ["tumbling", "hopping"])
def test_windows_match_kafka_streams(name: str, kstreams: Any, brokers: str,
                                     make_processor: Callable[..., Any]) -> None:  # fmt: skip
    topic = f"peer-windows-{name}"
    manager = TopicManager(brokers)
    manager.ensure_stream_exists(topic, PARTITIONS)
    for sink in (f"{topic}-ks", f"{topic}-{name}-finals", f"{topic}-{name}-late"):
        manager.ensure_stream_exists(sink, PARTITIONS)
    with Emitter(brokers, topic, StringCodec()) as emitter:
        for key, at in pw.events(N, keys=15, seed=11):
            emitter.emit(key, "/page", timestamp=at)
        assert emitter.flush(60) == 0
    sent = {p: [(o, k.decode(), t) for o, k, _, t, _ in rows]
            for p, rows in _read(brokers, topic).items()}  # fmt: skip
    finals, late, partly = pw.reference(sent, name)
    assert len(late) > 20 and len(finals) > 100  # the input has what is compared
    assert partly > 0 or name == "tumbling"

    size, advance = pw.WINDOWS[name]
    peer = kstreams.run(brokers, topic, app=f"peer-windows-{name}", topology=name, expect=N,
                        output=f"{topic}-ks", size_ms=size, advance_ms=advance,
                        grace_ms=pw.GRACE, cache_bytes=0, threads=1, timeout=240)  # fmt: skip
    ks_finals = Counter({(k.decode(), int(h["window-start"])): int.from_bytes(v or b"", "big")
                         for rows in _read(brokers, f"{topic}-ks").values()
                         for _, k, v, _, h in rows})  # fmt: skip
    windows_per_record = size // advance
    dropped = Counter((d.partition, d.offset) for d in peer.dropped_records)
    ks_late = {where for where, n in dropped.items() if n == windows_per_record}

    make_processor(pw.group(topic, name)).run_until_caught_up()
    goka_finals = Counter({(k.decode(), int(h[WINDOW_START])): int(v or b"0")
                           for rows in _read(brokers, f"{topic}-{name}-finals").values()
                           for _, k, v, _, h in rows})  # fmt: skip
    goka_late = {tuple(int(x) for x in (v or b"").decode().split())
                 for rows in _read(brokers, f"{topic}-{name}-late").values()
                 for _, _, v, _, _ in rows}  # fmt: skip

    assert ks_finals == finals, "Kafka Streams differs from the reference"
    assert goka_finals == ks_finals
    assert ks_late == late, "Kafka Streams' late records differ from the reference"
    assert goka_late == ks_late
    assert peer.dropped == sum(dropped.values())  # its metric counts what its log names
