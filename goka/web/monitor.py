"""Monitor pages of the processor and view services, like Go Goka's web monitor.

Each service mounts its monitor's :meth:`handle` as a route of its HTTP port: ``/`` is the page,
``/api/monitor`` its JSON. A sampler thread reads the figures every ``interval`` seconds; pages
and their refreshes only read the last sample, so watching costs the service nothing more.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from goka.web.pages import REFRESH_JS, e, html_page, json_response, table
from goka.web.tables import Response

__all__ = ["Monitor", "ProcessorMonitor", "ViewMonitor"]

log = logging.getLogger(__name__)


def _recovering(said: dict[str, Any]) -> str:
    """``rebuilding 120,000 of 400,000`` while a task says it recovers the partition's store."""
    if said.get("state") not in ("restoring", "rebuilding"):
        return ""
    return f"{said['state']} {said.get('records', 0):,} of {said.get('of', 0):,}"


def _megabytes(size: int | None) -> str:
    """A store's size as of its last batch or epoch ("" before the first one ended)."""
    return "" if size is None else f"{size / 1e6:.1f} MB"


def clock_text(at: float | None) -> str:
    """A moment as the pages show it (local HH:MM:SS; "" for none)."""
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else ""


class Monitor:
    """Samples ``sample()`` every ``interval`` seconds on a thread; serves page and JSON."""

    title = "goka"
    interval = 2.0

    def __init__(self, *, interval: float = 2.0, history: int = 300) -> None:
        self.interval = interval
        self._last: dict[str, Any] = {}
        self._history: collections.deque[dict[str, float]] = collections.deque(maxlen=history)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="goka-monitor", daemon=True)

    def start(self) -> Monitor:
        self.refresh()
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def refresh(self) -> None:
        """Take a sample now (the thread takes one every ``interval``)."""
        try:
            sample = self.sample()
        except Exception:  # a failed sample keeps the previous one on the page
            log.exception("monitor sample failed")
            return
        with self._lock:
            self._last = sample
            self._history.append(sample.pop("point"))

    def snapshot(self) -> dict[str, Any]:
        """The last sample, with the chart's points."""
        with self._lock:
            return {**self._last, "history": list(self._history)}

    def sample(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def page(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def links(self) -> list[tuple[str, str]]:
        return [("monitor", "/"), ("metrics", "/metrics"), ("ready", "/readyz")]

    def handle(self, target: str) -> Response | None:
        """Answer ``/`` and ``/api/monitor``; None for other paths."""
        path = target.split("?", 1)[0]
        if path == "/api/monitor":
            return json_response(self.snapshot())
        if path in ("/", "/monitor"):
            return html_page(self.title, self.page(), links=self.links(),
                             script=REFRESH_JS + self.script())  # fmt: skip
        return None

    def script(self) -> str:  # pragma: no cover - overridden
        return ""


class ProcessorMonitor(Monitor):
    """The processors of one ``goka processor run`` (groups, edges, partitions, errors)."""

    title = "goka processor"

    def __init__(self, processors: Sequence[Any], *, spark_ui: Callable[[], str | None] =
                 lambda: None, connectors: Callable[[], list[dict[str, Any]]] | None = None,
                 interval: float = 2.0) -> None:  # fmt: skip
        super().__init__(interval=interval)
        self.processors = list(processors)
        self.spark_ui = spark_ui
        #: the statuses of the connectors of the groups' topics
        #: (:meth:`goka.connect.status.ConnectorBoard.connectors`)
        self.connectors = connectors
        self._offsets: dict[tuple[str, str, int], tuple[int, float]] = {}

    def links(self) -> list[tuple[str, str]]:
        ui = self.spark_ui()
        return [*super().links(), *([("Spark UI", ui)] if ui else [])]

    def sample(self) -> dict[str, Any]:
        groups, total_rate, total_lag, now = [], 0.0, 0, time.time()
        for processor in self.processors:
            group = self._group(processor, now)
            total_rate += sum(row[6] for row in group["partitions"])
            total_lag += sum(row[3] or 0 for row in group["partitions"])
            groups.append(group)
        point = {"t": now, "records_per_s": round(total_rate, 1), "lag": total_lag}
        return {"groups": groups, "connectors": self._connectors(), "point": point,
                "spark_ui": self.spark_ui()}  # fmt: skip

    def _connectors(self) -> list[list[Any]]:
        """A row per connector of the groups' topics, as their status topic says."""
        if self.connectors is None:
            return []
        try:
            found = self.connectors()
        except Exception as exc:  # the broker unreachable: the groups are still shown
            log.warning("connector statuses: %s", exc)
            return []
        return [[c.get("name"), f"{c.get('type')} {c.get('kind')}", c.get("state"),
                 c.get("rate"), c.get("lag"), c.get("last_commit_at") or "",
                 (c.get("errors") or [""])[-1], f"{c.get('silent_for', 0):.0f} s ago",
                 c.get("url") or ""] for c in found]  # fmt: skip

    def _group(self, processor: Any, now: float) -> dict[str, Any]:
        active = processor.active
        failure = getattr(processor, "failure", None)
        try:
            parts = processor.partition_status() if processor.prepared else []
        except Exception as exc:  # brokers unreachable: show it, keep sampling
            parts, failure = [], failure or f"partition status: {exc}"
        totals = processor.totals
        recent = list(totals.recent)[-3:]
        # a continuous processor's epoch reports at its end (30 s by default): until then,
        # count what its partitions said they committed (the board) since the last one
        epochs = processor.mode == "continuous"
        since = max(totals.last_finished_at, getattr(processor, "started_at", 0.0))
        board, running = (
            processor.board.sample(since if epochs else None) if hasattr(processor, "board")
            else ({}, 0)
        )  # fmt: skip
        processed = totals.processed + running
        sizes = {part.partition: part.store_bytes for b in recent for part in b.partitions}
        flight = _flight(processor.graph.concurrency, [p for b in recent for p in b.partitions])
        rows = []
        for part in parts:
            key = (processor.graph.group, part["topic"], part["partition"])
            offset, rate = part["offset"], 0.0
            before = self._offsets.get(key)
            if offset is not None:
                if before is not None and now > before[1]:
                    rate = max(0.0, (offset - before[0]) / (now - before[1]))
                self._offsets[key] = (offset, now)
            said = board.get(part["partition"], {})
            running = _recovering(said) or ("restoring" if offset is None else "running")
            state = "failed" if failure else "idle" if not active else running
            size = sizes.get(part["partition"])
            rows.append([part["partition"], part["topic"], offset, part["lag"], state,
                         clock_text(part["committed_at"]), round(rate, 1),
                         _megabytes(size)])  # fmt: skip
        return {
            "group": processor.graph.group, "mode": processor.mode, "active": active,
            "failure": failure, "edges": [edge.describe() for edge in processor.graph.edges()],
            "partitions": rows, "batches": totals.batches, "processed": processed,
            "unit": ["epoch", "epochs"] if epochs else ["batch", "batches"],
            "skipped_applied": totals.skipped_applied, "dead_letters": totals.dead_letters,
            "failed": totals.failed, "errors": list(totals.errors),
            "last_batch": clock_text(totals.last_finished_at) if totals.batches else "",
            "flight": flight,
        }  # fmt: skip

    def page(self) -> str:
        snapshot, parts = self.snapshot(), []
        for i, group in enumerate(snapshot.get("groups", [])):
            parts.append(
                f"<h2>group {e(group['group'])} <span class='muted'>({e(group['mode'])})</span>"
                f"</h2><p id='summary-{i}'>{e(_summary(group))}</p>"
                f"<p id='flight-{i}'>{e(group['flight'])}</p>"
                + table(["edge"], [[edge] for edge in group["edges"]])
                + "<h2>partitions</h2>"
                + table(
                    [
                        "partition",
                        "topic",
                        "offset",
                        "lag",
                        "state",
                        "last commit",
                        "records/s",
                        "store",
                    ],
                    group["partitions"],
                    ident=f"partitions-{i}",
                    numeric=(0, 2, 3, 6),
                )
                + "<h2>recent errors</h2>"
                + table(["error"], [[err] for err in group["errors"]], ident=f"errors-{i}")
            )
        if self.connectors is not None:
            parts.append("<h2>connectors</h2>" + table(
                ["connector", "type", "state", "records/s", "lag", "last commit", "last error",
                 "heard", "monitor"], snapshot.get("connectors", []), ident="connectors",
                numeric=(3, 4)))  # fmt: skip
        chart = "<h2>records/s and lag</h2><svg id='chart' width='600' height='140'></svg>"
        return "".join(parts) + chart

    def script(self) -> str:
        return """
every(2000, '/api/monitor', doc => {
  // a page served before the first sample has no group's tables: serve it again
  const missing = (g, i) => !document.getElementById('summary-' + i);
  if ((doc.groups || []).some(missing)) location.reload();
  fill('connectors', doc.connectors, [3, 4]);
  doc.groups.forEach((g, i) => {
    fill('partitions-' + i, g.partitions, [0, 2, 3, 6]);
    fill('errors-' + i, g.errors.map(x => [x]), []);
    const s = document.getElementById('summary-' + i);
    if (s) s.textContent = summary(g);
    const f = document.getElementById('flight-' + i);
    if (f) f.textContent = g.flight;
  });
  chart('chart', doc.history, [['records_per_s', '#1f6feb'], ['lag', '#b3261e']]);
});
function summary(g) {
  return (g.failure ? 'FAILED: ' + g.failure + '; ' : (g.active ? 'running; ' : 'stopped; ')) +
    g.batches + ' ' + g.unit[1] + ', ' + g.processed + ' records, ' +
    (g.skipped_applied ? g.skipped_applied + ' already applied (skipped), ' : '') +
    g.failed + ' failed, ' + g.dead_letters + ' dead letters' +
    (g.last_batch ? ', last ' + g.unit[0] + ' ' + g.last_batch : '');
}
"""


def _flight(concurrency: int, parts: Sequence[Any]) -> str:
    """How a group's records were in flight in its recent batches (epochs): "" for a group
    that runs one record at a time."""
    if concurrency < 2:
        return ""
    most = max((p.in_flight_most for p in parts), default=0)
    longest = max((p.in_flight_longest for p in parts), default=0.0)
    held = max((p.in_flight_held for p in parts), default=0)
    waiting: Counter[str] = Counter()
    for part in parts:
        waiting.update(json.loads(part.waiting_keys or "{}"))
    keys = ", ".join(f"{key} ({count})" for key, count in waiting.most_common(5))
    return (f"in flight: at most {most} of {concurrency} a partition, the longest "
            f"{longest:.2f} s; at most {held} finished and held behind an earlier record; "
            f"records that waited for their key: {keys or 'none'}")  # fmt: skip


def _summary(group: dict[str, Any]) -> str:
    head = f"FAILED: {group['failure']}; " if group["failure"] else (
        "running; " if group["active"] else "stopped; ")  # fmt: skip
    one, many = group["unit"]
    tail = f", last {one} {group['last_batch']}" if group["last_batch"] else ""
    skipped = group.get("skipped_applied", 0)
    applied = f"{skipped} already applied (skipped), " if skipped else ""
    return (f"{head}{group['batches']} {many}, {group['processed']} records, {applied}"
            f"{group['failed']} failed, {group['dead_letters']} dead letters{tail}")  # fmt: skip


class ViewMonitor(Monitor):
    """The views of one ``goka view serve``: state, partitions, gRPC request rates."""

    title = "goka view"

    def __init__(self, views: Callable[[], Sequence[Any]], *, interval: float = 2.0) -> None:
        super().__init__(interval=interval)
        self.views = views
        self._requests: tuple[float, dict[str, float]] | None = None

    def links(self) -> list[tuple[str, str]]:
        return [*super().links(), ("table browser", "/browse")]

    def sample(self) -> dict[str, Any]:
        tables, now = [], time.time()
        for view in self.views():
            stats = view.stats()
            rows = [[p, s.offset, s.high_watermark, s.lag] for p, s in sorted(
                stats.partitions.items())]  # fmt: skip
            tables.append({"table": view.table, "codec": view.codec.name,
                           "state": stats.state.value, "recovered": stats.recovered,
                           "applied": stats.applied, "lag": stats.lag,
                           "partitions": rows})  # fmt: skip
        rates = self._rates(now)
        point = {"t": now, "requests_per_s": round(sum(r for _, r in rates), 1),
                 "lag": sum(t["lag"] or 0 for t in tables)}  # fmt: skip
        return {"tables": tables, "requests": rates, "point": point}

    def _rates(self, now: float) -> list[tuple[str, float]]:
        from prometheus_client import REGISTRY

        counts: dict[str, float] = collections.defaultdict(float)
        for family in REGISTRY.collect():
            if family.name == "goka_grpc_requests":
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        counts[sample.labels["method"]] += sample.value
        before, self._requests = self._requests, (now, dict(counts))
        if before is None or now <= before[0]:
            return [(m, 0.0) for m in sorted(counts)]
        return [(m, round((c - before[1].get(m, 0.0)) / (now - before[0]), 1))
                for m, c in sorted(counts.items())]  # fmt: skip

    def page(self) -> str:
        snapshot, parts = self.snapshot(), []
        for i, t in enumerate(snapshot.get("tables", [])):
            parts.append(
                f"<h2>table {e(t['table'])} <span class='muted'>({e(t['codec'])})</span></h2>"
                f"<p>state <b id='state-{i}' class='state-{e(t['state'].replace(' ', '_'))}'>"
                f"{e(t['state'])}</b>; <span id='applied-{i}'>{e(t['applied'])}</span> records "
                f"applied; <a href='/browse?table={e(t['table'])}'>browse</a></p>"
                + table(
                    ["partition", "offset", "end", "lag"],
                    t["partitions"],
                    ident=f"partitions-{i}",
                    numeric=(0, 1, 2, 3),
                )
            )
        parts.append("<h2>gRPC requests/s</h2>" + table(
            ["method", "requests/s"], snapshot.get("requests", []), ident="requests",
            numeric=(1,)))  # fmt: skip
        parts.append("<h2>requests/s and lag</h2>"
                     "<svg id='chart' width='600' height='140'></svg>")  # fmt: skip
        return "".join(parts)

    def script(self) -> str:
        return """
every(2000, '/api/monitor', doc => {
  doc.tables.forEach((t, i) => {
    fill('partitions-' + i, t.partitions, [0, 1, 2, 3]);
    const s = document.getElementById('state-' + i);
    if (s) { s.textContent = t.state; s.className = 'state-' + t.state.replace(' ', '_'); }
    const a = document.getElementById('applied-' + i);
    if (a) a.textContent = String(t.applied);
  });
  fill('requests', doc.requests, [1]);
  chart('chart', doc.history, [['requests_per_s', '#1f6feb'], ['lag', '#b3261e']]);
});
"""
