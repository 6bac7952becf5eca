"""A processor's settings are declared once (goka.processing.settings): the driver's and the
tasks' configurations, the Processor's keyword arguments, the command line's flags and the
documentation's table all come from that declaration."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest

from goka import Int64Codec, StringCodec, define_group, input, persist
from goka.cli import build_parser
from goka.commands.processor import MODES as CLI_MODES
from goka.commands.processor import OWN_FLAGS
from goka.errors import ConfigurationError
from goka.processing.config import TaskConfig
from goka.processing.settings import MODES, ProcessorSettings, cli_settings, settings
from goka.spark.config import ProcessorConfig

GRAPH = define_group("settings", input("clicks", StringCodec(), lambda ctx, msg: None),
                     persist(Int64Codec()))  # fmt: skip


def _run_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            processor = action.choices["processor"]
            for sub in processor._actions:
                if isinstance(sub, argparse._SubParsersAction):
                    found: argparse.ArgumentParser = sub.choices["run"]
                    return found
    raise AssertionError("no `goka processor run`")


def test_every_setting_is_described() -> None:
    declared = settings()
    assert len(declared) >= 25
    assert [s.name for s in declared if len(s.description) < 15] == []


def test_the_configurations_are_made_of_the_declaration() -> None:
    names = {s.name for s in settings()}
    driver = {f.name for f in dataclasses.fields(ProcessorConfig)}
    assert driver - names == {"graph", "brokers", "session"}
    task = {f.name for f in dataclasses.fields(TaskConfig)}
    assert names <= task
    config = ProcessorConfig(GRAPH, "localhost:9092", fire_budget=7, window_cache=11,
                             snapshot_interval=0, broker_timeout=3.5)  # fmt: skip
    carried = config.task_config()
    for name in ("fire_budget", "window_cache", "broker_timeout", "on_error", "epoch"):
        assert getattr(carried, name) == getattr(config, name), name


def test_the_processor_takes_exactly_the_declared_settings() -> None:
    from goka.spark import Processor

    parameters = inspect.signature(Processor.__init__).parameters
    assert list(parameters) == ["self", "graph", "brokers", "spark", "master", "session",
                                "settings"]  # fmt: skip
    with pytest.raises(ConfigurationError, match=r"unknown processor settings \['epochs'\]"):
        Processor(GRAPH, "localhost:9092", epochs=3)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"commit_interval": 40.0}, "commit_interval < epoch"),
        ({"fire_budget": 0}, "fire_budget must be an int >= 1"),
        ({"window_cache": -1}, "window_cache must be an int >= 0"),
        ({"snapshots_kept": 0}, "snapshots_kept must be an int >= 1"),
        ({"epoch_tasks": 0}, "epoch_tasks must be an int >= 1"),
        ({"mode": "batch"}, "mode must be one of"),
        ({"on_error": "retry"}, "on_error must be one of"),
        ({"log_format": "xml"}, "log_format must be text or json"),
        ({"starting_offsets": "newest"}, "starting_offsets must be"),
        ({"broker_timeout": 0}, "broker_timeout must be > 0"),
        ({"guarantee": "exactly_once"}, "guarantee must be one of"),
    ],
)
def test_invalid_settings_fail_when_declared(change: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ProcessorSettings(**change)  # type: ignore[arg-type]  # wrong on purpose


def test_the_command_line_offers_the_declared_settings() -> None:
    run = _run_parser()
    flags = {a.dest: a for a in run._actions}
    for setting in cli_settings():
        action = flags[setting.name]
        assert action.default == setting.default, setting.name
        assert action.help is not None and setting.description.replace("``", "") in action.help
        assert tuple(action.choices or ()) == (setting.choices or ()), setting.name
    declared = {s.name for s in settings()}
    assert {n for n in flags if n in declared} == {s.name for s in cli_settings()} | set(OWN_FLAGS)
    assert set(CLI_MODES) == set(MODES)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"kafka_config": {"isolation.level": "read_uncommitted"}}, "isolation.level"),
        ({"kafka_config": {"consumer.isolation.level": "read_uncommitted"}}, "isolation.level"),
        ({"kafka_config": {"producer.transactional.id": "mine"}}, "transactional id of its own"),
        ({"producer_config": {"enable.idempotence": False}}, "idempotent producer"),
        ({"commit_interval": 20.0, "epoch": 60.0}, "commit_interval must be at most 15 s"),
    ],
)
def test_settings_exactly_once_cannot_keep_its_promise_with_are_refused_at_declaration(
    given: dict[str, object], said: str
) -> None:
    with pytest.raises(ConfigurationError, match=said):
        ProcessorSettings(guarantee="exactly-once", **given)  # type: ignore[arg-type]
    ProcessorSettings(guarantee="at-least-once", **given)  # type: ignore[arg-type]  # (fine)


def test_the_longest_exactly_once_commit_interval_is_a_quarter_of_the_transaction_timeout() -> None:
    from goka.kafka.transactions import TRANSACTION_TIMEOUT_MS
    from goka.processing.settings import MOST_EXACTLY_ONCE_COMMIT_INTERVAL

    assert MOST_EXACTLY_ONCE_COMMIT_INTERVAL == TRANSACTION_TIMEOUT_MS / 1000 / 4
    ProcessorSettings(guarantee="exactly-once", kafka_config={"isolation.level": "read_committed"})


def test_storage_options_reach_the_snapshots_merged_key_by_key_and_the_flag_takes_json() -> None:
    config = TaskConfig(
        GRAPH, "b:9092",
        storage_options={"endpoint_url": "http://minio:9000", "config_kwargs": {"a": 1}},
        snapshot_options={"config_kwargs": {"b": 2}, "key": "k"},
    )  # fmt: skip
    assert config.snapshot_options == {"endpoint_url": "http://minio:9000", "key": "k",
                                       "config_kwargs": {"a": 1, "b": 2}}  # fmt: skip
    args = _run_parser().parse_args(["g:graph", "--storage-options", '{"anon": true}'])
    assert args.storage_options == {"anon": True}
    with pytest.raises(SystemExit):
        _run_parser().parse_args(["g:graph", "--storage-options", "[1]"])
