"""``goka connect run|status|offsets|reset|snapshot``: connectors (a sink declared in Python as
``module:attribute``, e.g. ``examples.click_count.sinks:clicks``) from the command line."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

from goka.commands.options import (
    HTTP_PORTS,
    add,
    add_brokers,
    at_least,
    brokers,
    port,
    said_with_flags,
)
from goka.errors import UsageError

__all__ = ["load_sink", "register"]

log = logging.getLogger(__name__)

#: The HTTP port of ``goka connect run`` (see :data:`~goka.commands.options.HTTP_PORTS`).
HTTP_PORT = HTTP_PORTS["connect"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    connect = commands.add_parser("connect", help="run connectors: sinks (tables into "
                                  "PostgreSQL and Parquet) and sources (files, PostgreSQL rows "
                                  "and changes into topics)")  # fmt: skip
    sub = connect.add_subparsers(dest="connect_command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run a sink (its topic into its table or files, as a Spark "
                         "job) or a source (its files or rows into its topic)")  # fmt: skip
    status = sub.add_parser("status", help="each partition's position in the target, the "
                            "topic's end and the lag")  # fmt: skip
    offsets = sub.add_parser("offsets", help="each partition's next offset, as the target (the "
                             "database, the manifest) says")  # fmt: skip
    reset = sub.add_parser("reset", help="forget the target's offsets and the checkpoint: the "
                           "next run starts over")  # fmt: skip
    snapshot = sub.add_parser("snapshot", help="have a PostgreSQL change source read tables "
                              "again, in chunks beside its changes (an incremental "
                              "snapshot)")  # fmt: skip
    for parser in (run, status, offsets, reset, snapshot):
        parser.add_argument("sink", metavar="MODULE:CONNECTOR",
                            help="the connector: a goka.connect sink (PostgresSink, ParquetSink) "
                            "or source (FileSource, PostgresSource, PostgresCdcSource), or a "
                            "function returning one")  # fmt: skip
    for parser in (run, status, offsets):
        add_brokers(parser)
    for parser in (run, reset):
        add(parser, "--checkpoint", "Spark's checkpoint directory of the job")
    run.add_argument("--until-caught-up", action="store_true",
                     help="write what the topic holds now, then stop")  # fmt: skip
    add(run, "--trigger", "micro-batch interval", default="1 second")
    add(run, "--max-offsets", "most records per micro-batch", type=at_least(1))
    add(run, "--master", "Spark master: local[N] or spark://host:7077",
        shown="local[2], or what spark-submit gives", env="GOKA_SPARK_MASTER",
        was="GOKA_MASTER")  # fmt: skip
    add(run, "--http-host", "address of the HTTP port (monitor /, REST /connectors, /metrics, "
        "/healthz, /readyz)", default="127.0.0.1")  # fmt: skip
    add(run, "--http-port", f"HTTP port (0: any free port, printed at start; default {HTTP_PORT}, "
        "none with --until-caught-up unless given)", type=port)  # fmt: skip
    for parser in (status, offsets):
        parser.add_argument("--json", action="store_true", help="print JSON")
    reset.add_argument("--yes", action="store_true", help="do it (else only say what it does)")
    add(snapshot, "--tables", "the tables to read, comma-separated schema.table",
        shown="all of the source's", env=False)  # fmt: skip
    run.set_defaults(run=_run)
    status.set_defaults(run=_status)
    offsets.set_defaults(run=_offsets)
    reset.set_defaults(run=_reset)
    snapshot.set_defaults(run=_snapshot)


def load_sink(spec: str) -> Any:
    """The sink ``module:attribute`` names (called if it is a function).

    Raises:
        UsageError: not ``module:attribute``, or not a sink.
    """
    from goka.connect import ParquetSink, PostgresSink
    from goka.connect.jobs import SOURCES

    sinks = (PostgresSink, ParquetSink, *SOURCES)
    module, _, name = spec.partition(":")
    if not module or not name:
        raise UsageError(f"a sink is given as module:attribute, got {spec!r}")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as exc:
        raise UsageError(f"cannot import {module!r} for {spec!r}: {exc}") from exc
    if callable(found) and not isinstance(found, sinks):
        found = found()
    if not isinstance(found, sinks):
        raise UsageError(f"{spec} is not a goka.connect sink (PostgresSink, ParquetSink) or "
                         f"source (FileSource, PostgresSource, PostgresCdcSource): "
                         f"{found!r}")  # fmt: skip
    return found


def _checkpoint(args: argparse.Namespace) -> str:
    if not args.checkpoint:
        raise UsageError("no checkpoint: pass --checkpoint DIR or set GOKA_CHECKPOINT")
    return str(args.checkpoint)


def _run(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.connect.jobs import SOURCES, source_job
    from goka.connect.source_job import SourceJob
    from goka.spark.sink import SinkJob

    connector = load_sink(args.sink)
    job: SinkJob | SourceJob[Any]
    if isinstance(connector, SOURCES):  # a source runs here, not on Spark
        job = source_job(connector, brokers(args))
    else:
        flags = {"trigger": "--trigger", "master": "--master",
                 "max_offsets_per_trigger": "--max-offsets"}  # fmt: skip
        with said_with_flags(flags):
            job = SinkJob(connector, brokers(args), checkpoint_dir=_checkpoint(args),
                          master=args.master, trigger=args.trigger,
                          max_offsets_per_trigger=args.max_offsets)  # fmt: skip
    port = args.http_port if args.http_port is not None or args.until_caught_up else HTTP_PORT
    with _serving(job, brokers(args), args.http_host, port):
        if args.until_caught_up:
            print(job.run_until_caught_up().describe(), flush=True)
            return 0

        def stopper() -> None:
            stop.wait()
            job.stop()

        threading.Thread(target=stopper, name="goka-connect-stop", daemon=True).start()
        job.run()
        print(job.totals.describe(), flush=True)
        return 0


@contextlib.contextmanager
def _serving(job: Any, brokers: str, host: str, port: int | None) -> Iterator[None]:
    """The connector's monitor while it runs: its statuses noted in the status topic (a
    processor's monitor page shows them) and, with a port, its HTTP port: the monitor page,
    the REST API, metrics and probes."""
    import os
    import socket

    from prometheus_client import REGISTRY

    from goka.connect.status import STATUS_TOPIC, StatusPublisher
    from goka.kafka.offsets import EndOffsets
    from goka.metrics import connector_collector
    from goka.web.connectors import ConnectorMonitor
    from goka.web.http import HttpService

    ends = EndOffsets(brokers, {})
    monitor = ConnectorMonitor([job], ends=ends.high)
    collector = connector_collector(monitor.snapshot)
    REGISTRY.register(collector)
    http = None
    if port is not None:
        http = HttpService(host, port, alive=lambda: job.status().state != "FAILED",
                           ready=lambda: job.status().state == "RUNNING",
                           routes=[monitor.handle])  # fmt: skip
    publisher = None
    try:
        publisher = StatusPublisher(brokers, f"{socket.gethostname()}:{os.getpid()}",
                                    None if http is None else http.url)  # fmt: skip
        monitor.publish = publisher.publish
    except Exception as exc:  # (topics not creatable here: the connector runs without it)
        log.warning("connector status not noted in %s: %s", STATUS_TOPIC, exc)
    monitor.start()  # its first sample before the address is told: a page loaded at once is full
    if http is not None:
        print(f"http {http.url} (monitor /, REST /connectors, /metrics, /healthz, /readyz)",
              flush=True)  # fmt: skip
    try:
        yield
    finally:
        monitor.close()
        monitor.refresh()  # the state it ended in, noted
        if publisher is not None:
            publisher.close()
        if http is not None:
            http.close()
        REGISTRY.unregister(collector)
        ends.close()


def _status(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.connect import PostgresSink
    from goka.connect.jobs import SOURCES
    from goka.connect.task import open_writer
    from goka.kafka.offsets import EndOffsets

    sink = load_sink(args.sink)
    if isinstance(sink, SOURCES):
        return _source_positions(sink, args)
    with open_writer(sink) as writer:
        stored = writer.offsets()
    ends = EndOffsets(brokers(args), {})
    try:
        count = ends.partition_counts([sink.topic])[sink.topic]
        high = ends.high([(sink.topic, p) for p in range(count)])
        low = ends.low([(sink.topic, p) for p in range(count)])
    finally:
        ends.close()
    rows = [{"partition": p, "offset": stored.get(p), "end": high[(sink.topic, p)],
             "lag": high[(sink.topic, p)] - stored.get(p, low[(sink.topic, p)])}
            for p in range(count)]  # fmt: skip
    if args.json:
        print(json.dumps({"sink": sink.name, "topic": sink.topic, "target": sink.describe(),
                          "partitions": rows}))  # fmt: skip
        return 0
    mode = f" ({sink.mode})" if isinstance(sink, PostgresSink) else ""
    print(f"sink {sink.name}: {sink.topic} -> {sink.describe()}{mode}, lag "
          f"{sum(int(r['lag'] or 0) for r in rows)}")  # fmt: skip
    for row in rows:
        print(f"  partition {row['partition']}: offset {row['offset']}, end {row['end']}, "
              f"lag {row['lag']}")  # fmt: skip
    return 0


def _offsets(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.connect.jobs import SOURCES
    from goka.connect.task import open_writer

    sink = load_sink(args.sink)
    if isinstance(sink, SOURCES):
        return _source_positions(sink, args)
    with open_writer(sink) as writer:
        found = writer.offsets()
    if args.json:
        print(json.dumps({str(p): o for p, o in sorted(found.items())}))
    else:
        for partition, offset in sorted(found.items()):
            print(f"{sink.topic} partition {partition}: {offset}")
    return 0


def _source_positions(source: Any, args: argparse.Namespace) -> int:
    """A source's status and offsets: each partition's last position (file and row...)."""
    from goka.connect.jobs import source_job

    found = source_job(source, brokers(args)).offsets()
    if args.json:
        print(json.dumps(found))
    else:
        print(f"source {source.name}: {source.describe()} -> {', '.join(_topics(source))}")
        for partition, at in found.items():
            print(f"  {partition}: {at}")
    return 0


def _reset(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.connect import PostgresCdcSource
    from goka.connect.jobs import SOURCES, source_job
    from goka.spark.sink import SinkJob

    sink = load_sink(args.sink)
    if isinstance(sink, PostgresCdcSource):
        if not args.yes:
            print(f"would drop replication slot {sink.slot} of source {sink.name} (the next run "
                  "starts at the database's current position); pass --yes to do it")  # fmt: skip
            return 0
        source_job(sink, "").reset()
        print(f"source {sink.name}: replication slot {sink.slot} dropped")
        return 0
    if isinstance(sink, SOURCES):
        raise UsageError(f"source {getattr(sink, 'name', '')}: its positions are the last "
                         f"records of {', '.join(_topics(sink))}; delete the topics' records "
                         "to start over")  # fmt: skip
    job = SinkJob(sink, "", checkpoint_dir=_checkpoint(args))
    if not args.yes:
        print(f"would forget the offsets of sink {sink.name} ({job.offsets()}) and remove "
              f"{job.checkpoint_dir}; pass --yes to do it")  # fmt: skip
        return 0
    job.reset()
    print(f"sink {sink.name}: offsets forgotten, checkpoint {job.checkpoint_dir} removed")
    return 0


def _snapshot(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.connect import PostgresCdcSource, PostgresCdcSourceJob

    source = load_sink(args.sink)
    if not isinstance(source, PostgresCdcSource):
        raise UsageError(f"{args.sink}: only a PostgresCdcSource takes snapshots, not "
                         f"{type(source).__name__}")  # fmt: skip
    tables = args.tables.split(",") if args.tables else list(source.tables)
    PostgresCdcSourceJob(source, "").snapshot(tables)
    print(f"source {source.name}: snapshot of {', '.join(tables)} asked for (read by the "
          "source, in chunks beside its changes, when it meets the signal)")  # fmt: skip
    return 0


def _topics(source: Any) -> list[str]:
    return list(getattr(source, "topics", None) or [source.topic])
