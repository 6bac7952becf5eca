from collections.abc import Callable, Sequence
from typing import Any

from goka.delivery import Delivery

class Counters:
    @property
    def delivered(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def latency_sum(self) -> float: ...
    def __init__(self, bounds: Sequence[float]) -> None: ...
    def record(self, latency: float, /) -> None: ...
    def add_failed(self) -> None: ...
    def bucket_counts(self) -> list[int]: ...

class DeliveryState:
    _done: bool
    _result: Delivery | None
    _error: BaseException | None
    _callbacks: list[Callable[[Any], object]] | None
    _event: Any
    _partition: int  # read-only
    _offset: int  # read-only
    def __init__(self, counters: Counters | None = None) -> None: ...
    def __call__(self, err: Any, msg: Any, /) -> None: ...

class Sender:
    @property
    def served(self) -> int: ...
    @property
    def serving(self) -> int: ...
    def __init__(
        self,
        topic: str,
        encode: Callable[[Any], bytes] | None,
        future_type: type[DeliveryState],
        counters: Counters,
        produce: Callable[..., Any],
        poll: Callable[[float], int],
        slow: Callable[..., Any],
        failed: Callable[[Any, str, bytes | None, BaseException], Any],
        callbacks_running: list[int],
    ) -> None: ...
    def emit(self, key: str, value: Any, /) -> Any: ...
    def close(self) -> None: ...

def calibrate(probe: Any, partition: int, offset: int, latency_us: int, /) -> bool: ...
def calibrate_record(
    probe: Any,
    topic: str,
    key: bytes,
    value: bytes,
    headers: list[tuple[str, bytes]],
    partition: int,
    offset: int,
    timestamp: int,
    /,
) -> bool: ...
def tail_rows(
    messages: list[Any],
    /,
) -> tuple[dict[int, list[tuple[Any, ...]]], list[Any]] | None: ...
def text_lossless(data: bytes | bytearray | memoryview, /) -> str: ...

class WindowUpdater:
    def __init__(
        self,
        *,
        suffix: Callable[[int, int], str],
        grace: int,
        by_close: dict[int, dict[str, bytes | None]],
        changes: dict[str, bytes | None],
        journal: list[tuple[dict[str, Any], str, Any]] | None,
        decode: Callable[[bytes], Any],
        encode: Callable[[Any], bytes],
        int64: bool,
        general: Callable[[str, int, Callable[[Any], Any], Any], None],
        effects: list[Any],
        kind: int,
        topic: str,
        sources: dict[str, Any] | None,
        absent: object,
    ) -> None: ...
    def update(
        self,
        key: str,
        windows: Sequence[tuple[int, int]],
        change: Callable[[Any], Any],
        source: Any,
        /,
    ) -> None: ...

def copy_json(
    prefixes: tuple[bytes, ...], kinds: bytes, key: int, message: Any, /
) -> tuple[bytes, bytes] | None: ...
