"""The optional C module goka._speedups against its pure-Python reference."""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import threading
import weakref
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goka import _accel
from goka.metrics import LATENCY_BUCKETS, PyEmitterStats

speedups = _accel.speedups
needs_speedups = pytest.mark.skipif(speedups is None, reason="goka._speedups is not built")


def test_speedups_are_built_in_the_development_environment() -> None:
    if os.environ.get("GOKA_NO_SPEEDUPS"):
        pytest.skip("GOKA_NO_SPEEDUPS is set")
    assert speedups is not None, "goka/_speedups.c did not build: is a C compiler installed?"


def test_goka_no_speedups_selects_the_pure_python_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOKA_NO_SPEEDUPS", "1")
    assert _accel.load() is None
    monkeypatch.setenv("GOKA_NO_SPEEDUPS", "0")
    built = importlib.util.find_spec("goka._speedups") is not None
    assert (_accel.load() is not None) == built


def test_goka_imports_and_emits_without_its_c_module() -> None:
    # (a fresh interpreter: the emitter chooses its futures when first imported)
    script = ("from goka._accel import speedups; assert speedups is None\n"
              "import goka.connect.postgres_cdc, goka.view\n"
              "from goka.emitter import Emitter, pending; assert pending.CPending is None\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ,
                          "GOKA_NO_SPEEDUPS": "1"}, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr


latencies = st.lists(
    st.one_of(
        st.sampled_from(LATENCY_BUCKETS),  # exactly on a bound: counted in that bucket (le)
        st.floats(min_value=0.0, max_value=60.0, allow_nan=False),
    ),
    max_size=200,
)


@needs_speedups
@given(latencies)
def test_c_counters_bucket_like_the_python_stats(values: list[float]) -> None:
    assert speedups is not None
    c, py = speedups.Counters(LATENCY_BUCKETS), PyEmitterStats()
    for value in values:
        c.record(value)
        py.record(value)
    c.add_failed()
    py.add_failed()
    assert c.bucket_counts() == py.bucket_counts()
    assert (c.delivered, c.failed) == (py.delivered, py.failed) == (len(values), 1)
    assert c.latency_sum == pytest.approx(py.latency_sum)


@needs_speedups
@given(st.binary(max_size=64))
def test_c_lossless_text_decodes_as_python_does(data: bytes) -> None:
    assert speedups is not None
    expected = data.decode("utf-8", "surrogateescape")
    for buffer in (data, bytearray(data), memoryview(data)):
        assert speedups.text_lossless(buffer) == expected
    with pytest.raises(TypeError):
        speedups.text_lossless("text")  # type: ignore[arg-type]  # the error under test


@needs_speedups
def test_counters_refuse_bounds_that_do_not_ascend() -> None:
    assert speedups is not None
    with pytest.raises(ValueError, match="strictly ascending"):
        speedups.Counters([0.1, 0.1])
    with pytest.raises(TypeError):
        speedups.Counters([0.1, "x"])


class _Message:
    def partition(self) -> int:
        return 3

    def offset(self) -> int:
        return 42

    def latency(self) -> float | None:
        return None  # librdkafka had no timing: counted as 0


def _future_type() -> Any:
    import goka.emitter.pending

    assert speedups is not None
    stats = speedups.Counters(LATENCY_BUCKETS)
    return goka.emitter.pending.future_class(
        goka.emitter.pending.CPending, "t", stats, threading.Event().set
    ), stats


@needs_speedups
def test_a_delivered_future_holds_ints_and_stays_out_of_the_gc() -> None:
    future_type, stats = _future_type()
    future = future_type(stats)
    assert not gc.is_tracked(future)
    future(None, _Message())
    assert future.done() and not gc.is_tracked(future)
    assert (future._partition, future._offset) == (3, 42)
    assert future.result(0).offset == 42
    assert (stats.delivered, stats.bucket_counts()[0]) == (1, 1)
    with pytest.raises(TypeError):
        future(None)


@needs_speedups
def test_a_future_in_a_reference_cycle_is_collected() -> None:
    future_type, stats = _future_type()

    def cycle() -> weakref.ref[Any]:
        future = future_type(stats)
        future.add_done_callback(lambda done: future)  # the callback refers to its future
        assert gc.is_tracked(future)
        return weakref.ref(future)

    alive = cycle()
    gc.collect()
    assert alive() is None


@needs_speedups
def test_a_failed_delivery_goes_to_the_python_fail_method() -> None:
    future_type, stats = _future_type()
    future = future_type(stats)

    class Error:
        def str(self) -> str:
            return "Broker: Not enough in-sync replicas"

        def retriable(self) -> bool:
            return True

    class Message(_Message):
        def key(self) -> bytes:
            return b"k"

    future(Error(), Message())
    error = future.exception(0)
    assert error is not None and "Not enough in-sync replicas" in str(error)
    assert (stats.delivered, stats.failed) == (0, 1)


@needs_speedups
def test_confluent_kafka_messages_are_read_directly_and_right() -> None:
    import confluent_kafka

    import goka.emitter.pending

    assert goka.emitter.pending.MESSAGE_FIELDS_READ_DIRECTLY  # the probe read back right
    future_type, stats = _future_type()
    future = future_type(stats)
    future(None, confluent_kafka.Message(partition=7, offset=2**40 + 3, latency=0.003))
    assert (future._partition, future._offset) == (7, 2**40 + 3)
    assert stats.bucket_counts()[LATENCY_BUCKETS.index(0.005)] == 1
    assert stats.latency_sum == pytest.approx(0.003)
    unknown = future_type(stats)
    unknown(None, confluent_kafka.Message(partition=1, offset=2))  # no latency: counted as 0
    assert stats.bucket_counts()[0] == 1


@needs_speedups
def test_a_probe_that_reads_back_wrong_switches_direct_reading_off() -> None:
    import confluent_kafka

    import goka.emitter.pending

    assert speedups is not None
    probe = confluent_kafka.Message(partition=1, offset=2, latency=0.5)
    try:
        assert not speedups.calibrate(probe, 1, 3, 500_000)  # an offset that does not match
        assert not speedups.calibrate(object(), 1, 2, 500_000)  # too small to hold the fields
        future_type, stats = _future_type()
        future = future_type(stats)
        future(None, confluent_kafka.Message(partition=4, offset=5, latency=0.02))  # by methods
        assert (future._partition, future._offset, stats.latency_sum) == (4, 5, 0.02)
    finally:
        assert goka.emitter.pending._calibrate()
