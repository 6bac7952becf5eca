"""Log set-up: repeated librdkafka lines folded, JSON lines."""

from __future__ import annotations

import json
import logging

import pytest

from goka.logs import JsonFormatter, RepeatFilter


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("goka.librdkafka", logging.ERROR, __file__, 1, message, None, None)


def test_repeated_lines_are_folded_with_a_count(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("goka.logs.time.monotonic", lambda: now[0])
    folding = RepeatFilter(window=10)
    line = "FAIL [thrd:127.0.0.1:1/bootstrap]: Connect to ipv4#127.0.0.1:1 failed (after {}ms)"
    passed = [folding.filter(_record(line.format(i))) for i in range(192)]
    assert passed.count(True) == 1  # 192 identical lines in a millisecond: one shown
    assert folding.filter(_record("another message"))
    now[0] += 11
    record = _record(line.format(7))
    assert folding.filter(record)
    assert record.getMessage().endswith("(191 more like it in the last 10 s)")


def test_json_lines() -> None:
    record = _record("hello %s")
    record.args = ("world",)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "hello world" and entry["level"] == "error"
    assert entry["logger"] == "goka.librdkafka" and "time" in entry
