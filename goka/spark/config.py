"""How a processor runs: :class:`ProcessorConfig`, validated when built (invalid settings fail
at declaration, not mid-stream), and the :class:`~goka.processing.config.TaskConfig` its tasks
are given."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from goka.group.graph import GroupGraph
from goka.kafka.config import bootstrap_servers
from goka.processing.config import TaskConfig
from goka.processing.settings import MODES, ProcessorSettings
from goka.spark.session import SessionSettings
from goka.storage.urls import check_location

__all__ = ["MODES", "ProcessorConfig"]


@dataclass(frozen=True)
class ProcessorConfig(ProcessorSettings):
    """A processor's configuration: the group, its brokers, how the driver's session is built,
    and every setting of :class:`~goka.processing.settings.ProcessorSettings` (declared and
    described there; :class:`goka.spark.Processor` takes them as keyword arguments). Checked
    when built: invalid settings fail at declaration, not mid-stream.

    Attributes:
        graph: the group to run.
        brokers: bootstrap servers.
        session: how the session built here is built (its master, ``local[2]`` unless
            spark-submit gives one; the UI; JVM options).

    Raises:
        ConfigurationError: an invalid setting, or a snapshot location that cannot be used.
    """

    graph: GroupGraph
    brokers: str
    session: SessionSettings = field(default_factory=SessionSettings)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set(brokers=bootstrap_servers(self.brokers))
        # a relative state_dir is resolved by each executor in its own working directory: on
        # a cluster every executor keeps its stores on its own disk
        checkpoint = self.checkpoint_dir or str(
            (Path(self.state_dir) / self.graph.group / "checkpoint").resolve()
        )
        snapshots = self.snapshot_dir or f"{checkpoint.rstrip('/')}/state"
        self._set(checkpoint_dir=checkpoint, snapshot_dir=snapshots)
        # the locations must be usable now, not in the first snapshot or from inside a task
        if self.snapshot_interval:
            self.builders.snapshots(self.snapshot_dir, keep=self.snapshots_kept,
                                    storage_options=dict(self.snapshot_options))  # fmt: skip
            check_location(self.snapshot_dir, self.snapshot_options, what="snapshot_dir")
        check_location(self.checkpoint_dir, self.storage_options, what="checkpoint_dir")

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
        settings = self.values()
        if continuous:  # outputs leave at once, not in 10 ms batches
            settings["producer_config"] = {"linger.ms": 1, **self.producer_config}
        return TaskConfig(self.graph, self.brokers, **settings, board_url=self.board_url,
                          stop_url=self.stop_url if continuous else None)  # fmt: skip
