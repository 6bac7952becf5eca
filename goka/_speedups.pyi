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
    @property
    def _counters(self) -> Counters | None: ...
    def __init__(self, counters: Counters | None = None) -> None: ...
    def __call__(self, err: Any, msg: Any, /) -> None: ...

class Sender:
    @property
    def served(self) -> int: ...
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
