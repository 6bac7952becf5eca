"""The monitor page and REST API of ``goka connect run``: each connector's state, rows per
second, lag (sinks), positions, last commit and errors; Kafka Connect's read verbs:

* ``GET /connectors``: the names;
* ``GET /connectors/<name>``: its type, target and topics;
* ``GET /connectors/<name>/status``: ``{"name", "connector": {"state", "worker_id"},
  "tasks": [...], "type"}`` as Kafka Connect answers it;
* ``GET /connectors/<name>/offsets``: ``{"offsets": [{"partition": {...}, "offset": {...}}]}``
  (a sink's next Kafka offsets; a source's positions, as in its records' headers).

Changing verbs (pause, resume, restart, delete, offsets reset) are the command line's:
``goka connect reset``, and stopping the process.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote

from goka.connect.status import ConnectorStatus
from goka.web.monitor import Monitor, clock_text
from goka.web.pages import e, json_response, table
from goka.web.tables import Response

__all__ = ["ConnectorMonitor"]

log = logging.getLogger(__name__)

#: Notes the connectors of a sample somewhere (their status topic).
Publish = Callable[[list[dict[str, Any]]], None]
#: Reads the high watermarks of ``(topic, partition)`` pairs (for sinks' lag).
Ends = Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]


class ConnectorMonitor(Monitor):
    """The connectors of one ``goka connect run`` (each with ``status()`` and ``name``).

    Args:
        jobs: the running jobs (:class:`~goka.spark.sink.SinkJob`,
            :class:`~goka.connect.source_job.SourceJob`).
        ends: reads topic ends, for the sinks' lag (None: no lag shown).
        worker_id: how the REST API names this process (default: host:port-less hostname).
        publish: given each sample's connectors (:meth:`goka.connect.status.StatusPublisher.
            publish`: a processor's monitor shows them).
    """

    title = "goka connect"

    def __init__(self, jobs: Sequence[Any], *, ends: Ends | None = None,
                 worker_id: str | None = None, interval: float = 2.0,
                 publish: Publish | None = None) -> None:  # fmt: skip
        super().__init__(interval=interval)
        self.jobs = list(jobs)
        self.publish = publish
        self._ends = ends
        self.worker_id = worker_id or socket.gethostname()
        self._counts: dict[str, tuple[float, int]] = {}

    # -- sampling --------------------------------------------------------------------------------
    def statuses(self) -> list[ConnectorStatus]:
        """Each job's status now."""
        return [job.status() for job in self.jobs]

    def sample(self) -> dict[str, Any]:
        now, connectors, total_rate, total_lag = time.time(), [], 0.0, 0
        for status in self.statuses():
            moved = _moved(status)
            before = self._counts.get(status.name)
            rate = 0.0 if before is None or now <= before[0] else max(
                0.0, (moved - before[1]) / (now - before[0]))  # fmt: skip
            self._counts[status.name] = (now, moved)
            rows = self._partitions(status)
            lag = sum(r[3] or 0 for r in rows)
            total_rate, total_lag = total_rate + rate, total_lag + lag
            connectors.append({**status.as_dict(), "rate": round(rate, 1), "lag": lag,
                               "partitions": rows,
                               "last_commit_at": clock_text(status.last_commit)})  # fmt: skip
        point = {"t": now, "records_per_s": round(total_rate, 1), "lag": total_lag}
        if self.publish is not None:
            try:
                self.publish(connectors)
            except Exception as exc:  # the page and the REST API go on without it
                log.warning("connector statuses not noted: %s", exc)
        return {"connectors": connectors, "point": point}

    def _partitions(self, status: ConnectorStatus) -> list[list[Any]]:
        """``[topic, partition, position, lag]`` rows (lag: sinks, when ends are known)."""
        pairs = []
        for name in status.positions:
            topic, _, number = name.rpartition("/")
            pairs.append((topic, int(number)))
        ends: dict[tuple[str, int], int] = {}
        if status.type == "sink" and self._ends is not None and pairs:
            try:
                ends = self._ends(pairs)
            except Exception:  # the broker unreachable: no lag, the rest still shown
                ends = {}
        rows = []
        for (topic, partition), position in zip(pairs, status.positions.values(), strict=True):
            end = ends.get((topic, partition))
            lag = None if end is None else max(0, end - int(position))
            rows.append([topic, partition, position, lag])
        return rows

    # -- answering -------------------------------------------------------------------------------
    def handle(self, target: str) -> Response | None:
        """The monitor (``/``, ``/api/monitor``) and the REST API (``/connectors...``)."""
        path = target.split("?", 1)[0].rstrip("/")
        if path == "/connectors":
            return json_response([job.status().name for job in self.jobs])
        if path.startswith("/connectors/"):
            return self._rest(path[len("/connectors/") :])
        return super().handle(target)

    def _rest(self, rest: str) -> Response:
        name, _, verb = rest.partition("/")
        found = [s for s in self.statuses() if s.name == unquote(name)]
        if not found:
            return json_response({"error_code": 404, "message": f"Connector {unquote(name)} "
                                  "not found"}, status=404)  # fmt: skip
        status = found[0]
        if verb == "":
            return json_response({"name": status.name, "type": status.type,
                                  "config": {"connector.class": status.kind,
                                             "target": status.target,
                                             "topics": ",".join(status.topics)},
                                  "tasks": [{"connector": status.name, "task": 0}]})  # fmt: skip
        if verb == "status":
            state = {"state": status.state, "worker_id": self.worker_id}
            task = {"id": 0, **state, **({"trace": status.failure} if status.failure else {})}
            return json_response({"name": status.name, "connector": state, "tasks": [task],
                                  "type": status.type})  # fmt: skip
        if verb == "offsets":
            return json_response({"offsets": [_offset(status, n, p)
                                              for n, p in status.positions.items()]})  # fmt: skip
        return json_response({"error_code": 404, "message": f"no {verb!r} here"}, status=404)

    def page(self) -> str:
        parts = []
        for i, c in enumerate(self.snapshot().get("connectors", [])):
            parts.append(
                f"<h2>{e(c['type'])} {e(c['name'])} <span class='muted'>({e(c['kind'])}: "
                f"{e(' '.join(c['topics']))} {'->' if c['type'] == 'sink' else '<-'} "
                f"{e(c['target'])})</span></h2><p id='summary-{i}'>{e(_summary(c))}</p>"
                + table(
                    ["topic", "partition", "position", "lag"],
                    c["partitions"],
                    ident=f"partitions-{i}",
                    numeric=(1, 3),
                )
                + "<h2>recent errors</h2>"
                + table(["error"], [[x] for x in c["errors"]], ident=f"errors-{i}")
            )
        chart = "<h2>records/s and lag</h2><svg id='chart' width='600' height='140'></svg>"
        return "".join(parts) + chart

    def links(self) -> list[tuple[str, str]]:
        return [*super().links(), ("connectors (REST)", "/connectors")]

    def script(self) -> str:
        return """
every(2000, '/api/monitor', doc => {
  doc.connectors.forEach((c, i) => {
    fill('partitions-' + i, c.partitions, [1, 3]);
    fill('errors-' + i, c.errors.map(x => [x]), []);
    const s = document.getElementById('summary-' + i);
    if (s) s.textContent = summary(c);
  });
  chart('chart', doc.history, [['records_per_s', '#1f6feb'], ['lag', '#b3261e']]);
});
function summary(c) {
  const counts = Object.entries(c.counts).map(([k, v]) => v + ' ' + k.replace('_', ' '));
  return c.state + (c.failure ? ' (' + c.failure + ')' : '') + '; ' + c.rate +
    ' records/s; ' + counts.join(', ') + (c.position ? '; at ' + c.position : '') +
    (c.last_commit_at ? '; last commit ' + c.last_commit_at : '');
}
"""


def _moved(status: ConnectorStatus) -> int:
    """The records a connector has moved so far (read by a sink, produced by a source)."""
    return status.counts.get("records" if status.type == "sink" else "produced", 0)


def _offset(status: ConnectorStatus, name: str, position: str) -> dict[str, Any]:
    topic, _, partition = name.rpartition("/")
    if status.type == "sink":
        return {"partition": {"kafka_topic": topic, "kafka_partition": int(partition)},
                "offset": {"kafka_offset": int(position)}}  # fmt: skip
    return {"partition": {"topic": topic, "partition": int(partition)},
            "offset": {"position": position}}  # fmt: skip


def _summary(c: dict[str, Any]) -> str:
    counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in c["counts"].items())
    failure = f" ({c['failure']})" if c["failure"] else ""
    at = f"; at {c['position']}" if c["position"] else ""
    commit = f"; last commit {c['last_commit_at']}" if c["last_commit_at"] else ""
    return f"{c['state']}{failure}; {c['rate']} records/s; {counts}{at}{commit}"
