"""``goka processor run``: group graphs as Spark Structured Streaming queries, one session."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from goka.commands.options import (
    HTTP_PORTS,
    add,
    add_brokers,
    add_http,
    at_least,
    brokers,
    said_with_flags,
    seconds,
    setting_flags,
)
from goka.errors import UsageError
from goka.processing.layout import move_flat_checkpoint, move_nested
from goka.processing.settings import cli_settings

__all__ = ["OWN_FLAGS", "register"]

log = logging.getLogger("goka.processor")

#: Settings whose flags are written here, not made from their declaration: the command runs
#: continuously by default, and keeps each group's state and checkpoint apart
#: (:mod:`goka.processing.layout`).
OWN_FLAGS = ("mode", "state_dir", "checkpoint_dir")
HTTP_PORT = HTTP_PORTS["processor"]

MODES = {
    "continuous": "epochs in which tasks process records as they arrive (tens of ms from emit "
    "to table)",
    "micro-batch": "a batch every --trigger (about a second from emit to table)",
    "available-now": "what is there at start, then exit (as --until-caught-up)",
}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    processor = commands.add_parser("processor", help="processor groups on Spark")
    sub = processor.add_subparsers(dest="processor_command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run", help="run group graphs as Spark Structured Streaming queries",
        description="Run each group graph (module:attribute; the current directory is "
        "importable) as one query of one Spark application, until Ctrl-C or SIGTERM.",
    )  # fmt: skip
    run.add_argument(
        "graphs",
        nargs="*",
        metavar="GRAPH",
        help="group graph as module:attribute (env GOKA_GRAPHS, comma-separated)",
    )
    add_brokers(run)
    add(run, "--master", "Spark master: local[N] or spark://host:7077",
        shown="local[2], or what spark-submit gives", env="GOKA_SPARK_MASTER",
        was="GOKA_MASTER")  # fmt: skip
    add(run, "--state-dir", "where each group keeps its partition stores, "
        "<state-dir>/<group>/partition-N", default="goka-state")  # fmt: skip
    add(run, "--checkpoint-dir", "where each group keeps its Spark checkpoint, "
        "<checkpoint-dir>/<group> (shared storage on a cluster)",
        default="<state-dir>/<group>/checkpoint")  # fmt: skip
    add(run, "--mode", "; ".join(f"{k}: {v}" for k, v in MODES.items()), default="continuous",
        choices=list(MODES))  # fmt: skip
    for setting in cli_settings():  # declared with their descriptions in one place
        flag = "--" + setting.name.replace("_", "-")
        parse = _policy if setting.name == "on_error" else setting.flag or str
        add(run, flag, setting.description.replace("``", ""), default=setting.default,
            type=parse, choices=setting.choices)  # fmt: skip
    add(run, "--grace", "seconds a stop waits for the running epoch to commit",
        default=10.0, type=seconds)  # fmt: skip
    add(run, "--concurrency", "records of a partition in flight at once, a key's one after "
        "another, for callbacks that wait on the network (unless given: the graph's)",
        type=at_least(1))  # fmt: skip
    add_http(run, HTTP_PORT)
    add(run, "--tls-cert", "PEM certificate chain: the HTTP port serves HTTPS")
    add(run, "--tls-key", "PEM private key of the certificate")
    add(run, "--tls-client-ca", "PEM CA of client certificates: serve only clients it signed")
    run.add_argument(
        "--create-topics",
        action="store_true",
        help="create missing output topics with the group's partition count",
    )
    run.add_argument("--until-caught-up", action="store_true",
                     help="the same as --mode available-now: process what the inputs hold "
                     "now (and what a loop derives from it), say what was done, exit")  # fmt: skip
    run.add_argument("--spark-ui", action="store_true",
                     help="turn the Spark UI on (its address is logged)")  # fmt: skip
    run.set_defaults(run=_run)


def _dirs(args: argparse.Namespace, group: str, groups: Mapping[str, Sequence[str]],
          ) -> tuple[str, str | None]:  # fmt: skip
    """``group``'s state directory and checkpoint, one layout whatever the number of groups
    (see :mod:`goka.processing.layout`, which moves what an earlier layout left); ``groups``:
    each group of the command with the topics it reads."""
    move_nested(args.state_dir, group)
    if args.checkpoint_dir.startswith("<"):  # (the default: <state-dir>/<group>/checkpoint)
        return args.state_dir, None
    move_flat_checkpoint(args.checkpoint_dir, groups)
    return args.state_dir, f"{args.checkpoint_dir.rstrip('/')}/{group}"


class _Respelled(str):
    """``--on-error dead_letter`` (the spelling until 2026-11), taken as ``dead-letter``: the
    command says so when it runs (:func:`_processors`)."""


def _policy(text: str) -> str:
    return _Respelled("dead-letter") if text == "dead_letter" else text


def _session(args: argparse.Namespace) -> Any:
    """The session's settings: ``--master`` and ``--spark-ui``, and the ``GOKA_SPARK_*``
    variables (docs/operations.md)."""
    import os

    from goka.spark.session import JAVA_OPTIONS, LOG4J, SessionSettings

    class_data = os.environ.get("GOKA_SPARK_CDS", "")
    return SessionSettings(
        master=args.master or None,
        ui=bool(args.spark_ui or os.environ.get("GOKA_SPARK_UI")),
        java_options=os.environ.get("GOKA_SPARK_JAVA_OPTIONS", JAVA_OPTIONS),
        class_data=None if class_data == "off" else class_data,
        log4j=os.environ.get("GOKA_SPARK_LOG4J", LOG4J),
    )


def _processors(args: argparse.Namespace) -> list[Any]:
    import os

    from goka.group.concurrent import with_concurrency
    from goka.group.graph import load_graph

    if isinstance(args.on_error, _Respelled):
        print("goka: warning: --on-error dead_letter is spelled dead-letter now (as every "
              "other choice); the old spelling will be refused in a later release",
              file=sys.stderr, flush=True)  # fmt: skip
        args.on_error = "dead-letter"  # (a plain str for the tasks)
    specs = args.graphs or [s for s in os.environ.get("GOKA_GRAPHS", "").split(",") if s]
    if not specs:
        raise UsageError("no group graph: pass module:attribute (or set GOKA_GRAPHS)")
    graphs = [load_graph(spec) for spec in specs]
    if args.concurrency is not None:
        graphs = [with_concurrency(g, args.concurrency) for g in graphs]
    groups = Counter(g.group for g in graphs)
    if any(n > 1 for n in groups.values()):
        raise UsageError(f"a group is given twice: {sorted(g for g, n in groups.items() if n > 1)}")
    from goka.spark import Processor

    made = []
    reads: dict[str, list[str]] = {  # (what each group's query reads)
        g.group: [*g.input_topics(), *g.joins] for g in graphs}  # fmt: skip
    names = [s.name for s in cli_settings()] + [*OWN_FLAGS, "log_level", "master"]
    with said_with_flags(setting_flags(names)):
        session = _session(args)
        for graph in graphs:
            state, checkpoint = _dirs(args, graph.group, reads)
            made.append(Processor(
                graph, brokers(args), session=session, state_dir=state,
                checkpoint_dir=checkpoint, mode=args.mode, log_level=args.log_level,
                log_format=args.log_format,
                **{s.name: getattr(args, s.name) for s in cli_settings()},
            ))  # fmt: skip
    return made


def _run(args: argparse.Namespace, stop: threading.Event) -> int:
    from goka.connect.status import ConnectorBoard
    from goka.web.http import HttpService
    from goka.web.monitor import ProcessorMonitor

    tls = _tls(args)
    processors = _processors(args)
    for processor in processors:  # every check before any query starts
        processor.create_topics() if args.create_topics else processor.prepare_topics()
    started = threading.Event()

    def spark_ui() -> str | None:
        return processors[0].spark().sparkContext.uiWebUrl if processors[0].config.session.ui and \
            started.is_set() else None  # fmt: skip

    board = ConnectorBoard(processors[0].config.brokers, _topics(processors),
                           kafka_config=dict(processors[0].config.kafka_config))  # fmt: skip
    # the first sample is taken before the page is served: a page loaded at once shows the groups
    monitor = ProcessorMonitor(processors, spark_ui=spark_ui, connectors=board.connectors).start()
    http = HttpService(
        args.http_host, args.http_port,
        alive=lambda: not any(p.failure for p in processors),
        ready=lambda: started.is_set() and all(p.active for p in processors),
        routes=[monitor.handle], tls=tls,
    )  # fmt: skip
    print(f"http {http.url} (monitor /, /metrics, /healthz, /readyz)", flush=True)
    try:  # the page shows the groups while Spark starts
        session = processors[0].spark()  # one session (application) for every group
        for processor in processors[1:]:
            processor.use_session(session)
        _take_signals_back(stop)  # PySpark's SparkContext installs its own SIGINT handler
        threading.Thread(target=_stopper, args=(stop, processors, args.grace),
                         name="goka-stop", daemon=True).start()  # fmt: skip
        if args.until_caught_up or args.mode == "available-now":
            return _until_caught_up(processors, args.on_error)
        for processor in processors:
            processor.start()
        started.set()
        running = list(processors)
        while running:
            for processor in list(running):
                if processor.wait(0.5):
                    running.remove(processor)
        return 0
    except BaseException:
        for processor in processors:
            processor.stop(grace=0)
        raise
    finally:
        monitor.close()
        board.close()
        http.close()


def _topics(processors: list[Any]) -> set[str]:
    """Every topic the groups read or write (their connectors are shown on the monitor)."""
    found: set[str] = set()
    for processor in processors:
        graph = processor.graph
        found.update(e.topic for e in graph.edges() if e.topic)
        found.update([*graph.input_topics(), *graph.changelogs()])
    return found


def _tls(args: argparse.Namespace) -> tuple[str, str, str | None] | None:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        raise UsageError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
    return (args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None


def _stopper(stop: threading.Event, processors: list[Any], grace: float) -> None:
    stop.wait()
    log.info("stopping: the running epochs commit (up to %.0f s)", grace)
    for processor in processors:
        processor.stop(grace=grace)


def _take_signals_back(stop: threading.Event) -> None:
    """Ctrl-C stops like SIGTERM (PySpark's handler would cancel the jobs and raise
    KeyboardInterrupt in the middle of a call to the JVM)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())


def _until_caught_up(processors: list[Any], on_error: str) -> int:
    for processor in processors:
        run = processor.run_until_caught_up()
        outcome = {"fail": "", "skip": f" ({run.failed} skipped)",
                   "dead-letter": f" ({run.dead_letters} dead-lettered)"}[on_error]  # fmt: skip
        print(f"caught up: {run.describe(outcome)}", flush=True)
    return 0
