"""How a processor runs: :class:`ProcessorConfig`, validated when built (invalid settings fail
at declaration, not mid-stream), and the :class:`~goka.processing.config.TaskConfig` its tasks
are given."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goka.engine import POLICIES, ErrorPolicy
from goka.errors import ConfigurationError
from goka.graph import GroupGraph
from goka.kafka.config import bootstrap_servers
from goka.processing.config import Builders, TaskConfig
from goka.spark.session import SessionSettings
from goka.topic_manager import TopicManagerConfig

__all__ = ["MODES", "ProcessorConfig"]

#: How a processor runs (see :class:`goka.spark.Processor`).
MODES = ("micro-batch", "continuous", "available-now")


@dataclass(frozen=True)
class ProcessorConfig:
    """Every setting of a processor (each is described at :class:`goka.spark.Processor`),
    checked when built. ``checkpoint_dir`` and ``snapshot_dir`` are derived where not given.

    Raises:
        ConfigurationError: an invalid setting, or a snapshot location that cannot be used.
    """

    graph: GroupGraph
    brokers: str
    state_dir: str = "goka-state"
    checkpoint_dir: str = ""
    mode: str = "micro-batch"
    trigger: str = "1 second"
    epoch: float = 30.0
    commit_interval: float = 0.1
    epoch_tasks: int | None = None
    on_error: ErrorPolicy = "fail"
    max_offsets_per_trigger: int | None = None
    starting_offsets: str = "earliest"
    kafka_config: Mapping[str, Any] = field(default_factory=dict)
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    topics: TopicManagerConfig = field(default_factory=TopicManagerConfig)
    snapshot_interval: float = 30.0
    snapshot_dir: str = ""
    snapshots_kept: int = 3
    snapshot_options: Mapping[str, Any] = field(default_factory=dict)
    builders: Builders = field(default_factory=Builders)
    progress_interval: float = 5.0
    broker_timeout: float = 30.0
    session: SessionSettings = field(default_factory=SessionSettings)
    log_level: str | None = None
    log_format: str = "text"

    def __post_init__(self) -> None:
        self._set(brokers=bootstrap_servers(self.brokers), state_dir=str(self.state_dir))
        if self.trigger == "available-now":
            self._set(mode="available-now")
        self._check()
        # a relative state_dir is resolved by each executor in its own working directory: on
        # a cluster every executor keeps its stores on its own disk
        checkpoint = str(self.checkpoint_dir) or str(
            (Path(self.state_dir) / self.graph.group / "checkpoint").resolve()
        )
        snapshots = str(self.snapshot_dir) or f"{checkpoint.rstrip('/')}/state"
        self._set(checkpoint_dir=checkpoint, snapshot_dir=snapshots)
        if self.snapshot_interval:  # the location must be usable now, not in the first snapshot
            self.builders.snapshots(self.snapshot_dir, keep=self.snapshots_kept,
                                    storage_options=dict(self.snapshot_options))  # fmt: skip

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _check(self) -> None:
        if self.on_error not in POLICIES:
            raise ConfigurationError(f"on_error must be one of {POLICIES}, got {self.on_error!r}")
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise ConfigurationError("max_offsets_per_trigger must be at least 1")
        if self.mode not in MODES:
            raise ConfigurationError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not 0 < self.commit_interval < self.epoch:
            raise ConfigurationError(
                f"need 0 < commit_interval < epoch, got commit_interval={self.commit_interval}, "
                f"epoch={self.epoch}"
            )
        if self.epoch_tasks is not None and self.epoch_tasks < 1:
            raise ConfigurationError(f"epoch_tasks must be at least 1, got {self.epoch_tasks}")
        for name in ("progress_interval", "broker_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.snapshot_interval < 0:
            raise ConfigurationError(
                f"snapshot_interval must be >= 0, got {self.snapshot_interval}"
            )
        _check_starting_offsets(self.starting_offsets)

    @property
    def stop_url(self) -> str:
        """Where the driver asks the tasks of an epoch to stop (beside the checkpoint)."""
        return f"{self.checkpoint_dir.rstrip('/')}/goka-stop"

    @property
    def board_url(self) -> str:
        """Where tasks say what their partitions do while they recover (beside the checkpoint)."""
        return f"{self.checkpoint_dir.rstrip('/')}/goka-partitions"

    def task_config(self, *, continuous: bool = False) -> TaskConfig:
        """What the tasks are given (for epochs if ``continuous``)."""
        producer_config = dict(self.producer_config)
        if continuous:  # outputs leave at once, not in 10 ms batches
            producer_config = {"linger.ms": 1, **producer_config}
        return TaskConfig(
            self.graph, self.brokers, self.state_dir, self.on_error, dict(self.kafka_config),
            producer_config, snapshot_url=self.snapshot_dir,
            snapshot_interval=self.snapshot_interval, snapshots_kept=self.snapshots_kept,
            snapshot_options=dict(self.snapshot_options), builders=self.builders,
            epoch=self.epoch if continuous else 0.0, commit_interval=self.commit_interval,
            stop_url=self.stop_url if continuous else None, board_url=self.board_url,
            read_timeout=self.broker_timeout, log_level=self.log_level,
            log_format=self.log_format,
        )  # fmt: skip


def _check_starting_offsets(starting: str) -> None:
    if starting in ("earliest", "latest", "group"):
        return
    try:
        given = json.loads(starting)
        valid = isinstance(given, dict) and all(
            isinstance(p, dict) and all(int(o) >= 0 for o in p.values()) for p in given.values()
        )
    except (ValueError, TypeError):
        valid = False
    if not valid:
        raise ConfigurationError(
            "starting_offsets must be earliest, latest, group or JSON like "
            f'{{"topic": {{"0": 42}}}}, got {starting!r}'
        )
