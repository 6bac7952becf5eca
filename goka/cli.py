"""The ``goka`` command line: processors, views, topics, tables, connectors and the development
broker.

Every flag has a ``GOKA_<FLAG>`` environment variable (``--http-port`` is ``GOKA_HTTP_PORT``).
Expected errors print one line saying what to do and exit with 2 (the command line is wrong)
or 1 (something failed while running); ``--debug`` shows the traceback. Ctrl-C stops like
SIGTERM: processors let the running epoch commit, views finish running requests.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file (spark-submit .../goka/cli.py), Python puts goka/ first on the path, where
# goka/grpc would shadow grpcio: take it off before anything else is imported.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import os
import signal
import threading
from collections.abc import Sequence

__all__ = ["build_parser", "main"]

#: What to do about an error of each kind, after its one line.
HINTS = {
    "ProcessingError": "to go on past failing records, run with --on-error skip or "
    "--on-error dead-letter (writes them to <group>-dlq)",
    "BrokerError": "check --brokers (or GOKA_BROKERS) and that the brokers are reachable",
    "ViewUnreachableError": "check --view and that the view service is running",
    "PortTakenError:http": "pass --http-port with a free port (0: any free one, printed at "
    "start), or stop what listens there",
    "PortTakenError:grpc": "pass --port with a free port (0: any free one, printed at start), "
    "or stop what listens there",
    "SinkError": "the record or column named above does not fit the table: fix the data or the "
    "table, or declare the sink with on_error='skip'",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("goka-py")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the ``goka`` command."""
    from goka.commands import broker, connect, processor, s3, table, topics, view
    from goka.commands.options import Parser

    parser = Parser(
        prog="goka", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"goka-py {_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks of errors (env GOKA_DEBUG)")  # fmt: skip
    parser.add_argument("--log-level", default=os.environ.get("GOKA_LOG_LEVEL", "INFO"),
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="log level (default: INFO; env GOKA_LOG_LEVEL)")  # fmt: skip
    parser.add_argument("--log-format", default=os.environ.get("GOKA_LOG_FORMAT", "text"),
                        choices=["text", "json"],
                        help="text, or one JSON object per line (default: text; env "
                        "GOKA_LOG_FORMAT)")  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (processor, view, table, topics, connect, broker, s3):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``goka`` command; return its exit code."""
    from goka.errors import ConfigurationError, GokaError, UsageError

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # module:attribute from the current directory
    debug = bool(os.environ.get("GOKA_DEBUG")) or "--debug" in (argv or sys.argv[1:])
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:  # a bad $GOKA_ value, found while building the parser
        return _fail(exc, 2, debug)
    from goka.logs import configure

    warnings = getattr(args, "_said", None) or ()  # (what this command's variables held)
    for said in warnings:
        print(f"goka: warning: {said}", file=sys.stderr, flush=True)
    configure(args.log_level, args.log_format)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        code: int = args.run(args, stop)
        return code
    except (UsageError, ConfigurationError) as exc:
        return _fail(exc, 2, debug)
    except (GokaError, ImportError, OSError) as exc:
        return _fail(exc, 1, debug)


def _fail(exc: BaseException, code: int, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exception(exc)
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    print(f"goka: error: {message}", file=sys.stderr, flush=True)
    hint = HINTS.get(getattr(exc, "cause", "") or type(exc).__name__)
    if hint:
        print(f"goka: {hint}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
