"""Log set-up for goka's commands and Spark workers, and the filter that folds repeated lines.

The command line takes the level and format from ``--log-level`` / ``--log-format`` (or
``GOKA_LOG_LEVEL`` / ``GOKA_LOG_FORMAT``), and a processor's tasks carry them to Spark's Python
workers (:attr:`goka.processing.config.TaskConfig.log_level`), which then log the same way.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time

__all__ = ["JsonFormatter", "RepeatFilter", "configure"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Log to stderr at ``level`` in ``fmt`` (text or json), replacing earlier handlers;
    py4j's chatter is kept to warnings."""
    level = level.upper()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for noisy in ("py4j", "py4j.java_gateway"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # a failing foreachBatch call is logged there with its traceback, and the query's error
    # that follows says the same: goka reports it once
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)


#: What varies between lines alike: "after 12ms", ports and ids, a client's number.
_TIMINGS = re.compile(r"\d+(\.\d+)?\s*ms|\d{4,}|(?<=#)(producer|consumer|admin)-\d+")


class RepeatFilter(logging.Filter):
    """Let a message through once per ``window`` seconds; the next one that passes says how
    many like it were held back. An unreachable broker makes librdkafka repeat the same
    line for every connection attempt of every client (192 lines in a millisecond, seen)."""

    def __init__(self, window: float = 10.0) -> None:
        super().__init__()
        self.window = window
        self._seen: dict[str, tuple[float, int]] = {}  # shape -> (last passed, held back)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        shape = _TIMINGS.sub("#", record.getMessage())  # (librdkafka's: "%s [%s] %s" % ...)
        now = time.monotonic()
        with self._lock:
            passed, held = self._seen.get(shape, (0.0, 0))
            if now - passed < self.window:
                self._seen[shape] = (passed, held + 1)
                return False
            if len(self._seen) > 1000:  # bounded: drop what is old
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window}
            self._seen[shape] = (now, 0)
        if held:
            record.msg = (
                f"{record.getMessage()} ({held} more like it in the last {self.window:g} s)"
            )
            record.args = None
        return True
