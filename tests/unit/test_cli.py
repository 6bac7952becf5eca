"""The ``goka`` command line without a broker: help, version, usage errors and exit codes."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from goka.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def goka(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "goka", *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})}, cwd=cwd,
    )  # fmt: skip
    return result.returncode, result.stdout, result.stderr


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_every_option_has_help_and_says_its_default() -> None:
    for parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help, f"{parser.prog} {action.option_strings or action.dest}: no help"
            takes_value = action.nargs != 0 and action.option_strings
            if takes_value and parser.prog != "goka":
                assert "default" in action.help, f"{parser.prog} {action.option_strings}"


def test_version() -> None:
    code, out, _ = goka("--version")
    assert code == 0 and out.startswith("goka-py 0."), out


def test_help_shows_defaults_and_environment() -> None:
    code, out, _ = goka("view", "serve", "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "(default: 127.0.0.1; env GOKA_HOST)" in flat
    assert "(default: 50051; env GOKA_PORT)" in flat
    assert "protobuf:MODULE.CLASS" in flat


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["view", "serve", "--brokers", "b:9092"], {}, "no table: pass --table"),
        (["view", "serve", "--table", "t", "--brokers", "b:9092", "--codec", "nope"], {},
         "--codec 'nope': expected one of bytes"),
        (["view", "serve", "--table", "t", "--codec", "avro:/no/such.avsc", "--brokers", "b"], {},
         "/no/such.avsc"),
        (["view", "serve", "--table", "t"], {"GOKA_BROKERS": ""}, "no Kafka brokers"),
        (["view", "serve", "--table", "t"], {"GOKA_PORT": "fifty"}, "$GOKA_PORT='fifty'"),
        (["processor", "run", "no_such_module:graph", "--brokers", "b"], {},
         "cannot import 'no_such_module'"),
        (["processor", "run", "goka:Emitter", "--brokers", "b"], {}, "is not a group graph"),
        (["processor", "run", "--brokers", "b"], {"GOKA_GRAPHS": ""}, "no group graph"),
        (["topics", "create", "t", "--partitions", "0", "--brokers", "b"], {},
         "--partitions must be at least 1"),
    ],
)  # fmt: skip
def test_usage_errors_print_one_line_and_exit_2(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    code, out, err = goka(*args, env={"GOKA_BROKERS": "", **env})
    lines = [line for line in err.splitlines() if not line.startswith("%")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("goka: error: "), err
    assert expected in lines[0], lines[0]


def test_debug_shows_the_traceback() -> None:
    code, _, err = goka("--debug", "processor", "run", "no_such_module:graph", "--brokers", "b")
    assert code == 2
    assert "Traceback (most recent call last)" in err and "ModuleNotFoundError" in err


def test_an_unreachable_broker_is_one_line_with_a_hint_and_exit_1() -> None:
    code, _, err = goka("topics", "list", "--brokers", "127.0.0.1:1", "--timeout", "1.5")
    assert code == 1, err
    errors = [line for line in err.splitlines() if line.startswith("goka: error:")]
    assert len(errors) == 1 and "no Kafka broker answered within 1.5s" in errors[0], err
    assert err.splitlines()[-1].startswith("goka: check --brokers"), err
    assert len(err.splitlines()) <= 6, err  # librdkafka's repeats are folded


def test_graphs_are_found_in_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "my_graphs.py").write_text("graph = 42\n")
    code, _, err = goka("processor", "run", "my_graphs:graph", "--brokers", "b", cwd=tmp_path,
                        env={"PYTHONPATH": ""})  # fmt: skip
    assert code == 2
    assert "my_graphs:graph is not a group graph" in err, err  # imported, then refused


def test_running_cli_py_as_a_file_does_not_shadow_grpcio() -> None:
    """spark-submit runs goka/cli.py as a script: goka/ must not be first on sys.path."""
    import goka.cli

    helped = subprocess.run(
        [sys.executable, goka.cli.__file__, "view", "serve", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert helped.returncode == 0, helped.stderr
    result = subprocess.run(
        [sys.executable, goka.cli.__file__, "table", "get", "t", "k", "--view", "127.0.0.1:1",
         "--timeout", "1"], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # grpcio itself answered: unreachable
    assert "goka: error:" in result.stderr and "ModuleNotFoundError" not in result.stderr
