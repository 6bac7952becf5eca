"""The futures an emitter returns: one per message, done when the brokers acknowledged it
(:class:`~goka.delivery.DeliveryFuture`). The pure-Python future is the producer's delivery
callback itself; where goka._speedups is built, the C one records the outcome in C and wakes
Python only for someone who waits or added a done-callback."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from goka._accel import speedups
from goka.delivery import Delivery, DeliveryFuture
from goka.kafka.producer import DeliveredMessage, KafkaErrorLike, delivery_error, probe_message
from goka.metrics import EmitterStats, PyEmitterStats

__all__ = [
    "MESSAGE_FIELDS_READ_DIRECTLY",
    "CPending",
    "DeliveryServer",
    "EmitterFuture",
    "PyPending",
    "future_class",
]

log = logging.getLogger(__name__)

#: Whether the C callback reads confluent-kafka's Message fields directly (see _calibrate).
MESSAGE_FIELDS_READ_DIRECTLY = False


class EmitterFuture(DeliveryFuture):
    """What both kinds of emitter futures share: failing, and building the Delivery lazily.

    A future keeps two ints (not the message, which holds a copy of key and value) and builds
    the :class:`Delivery` only if asked for. The emitter makes one subclass per emitter holding
    its topic and stats as class attributes, so creating a future takes no arguments.
    """

    if not TYPE_CHECKING:
        __slots__ = ()
    _topic: str
    _stats: EmitterStats
    _partition: int
    _offset: int
    _interest: Callable[[], None]  # wakes the emitter's poll thread: someone waits for a result

    if TYPE_CHECKING:

        def __call__(self, error: KafkaErrorLike | None, message: DeliveredMessage) -> None:
            """The producer's delivery callback."""

    def _fail(self, error: KafkaErrorLike, message: DeliveredMessage) -> None:
        self.set_exception(delivery_error(self._topic, message.key(), error))

    def _wait(self, timeout: float | None) -> None:
        if not self._done:
            self._interest()  # the poll thread serves at once, even while others emit
        super()._wait(timeout)

    def add_done_callback(self, fn: Callable[[DeliveryFuture], object]) -> None:
        if not self._done:
            self._interest()
        super().add_done_callback(fn)

    def _delivery(self) -> Delivery:
        if self._result is None:
            self._result = Delivery(self._topic, self._partition, self._offset)
        return self._result


class PyPending(EmitterFuture):
    """The pure-Python future: the future itself is the producer's delivery callback, so
    emitting allocates no bound method."""

    _partition = -1
    _offset = -1
    _record: Callable[[float], None]  # the stats' record, bound

    def __call__(self, error: KafkaErrorLike | None, message: DeliveredMessage) -> None:
        if error is None:
            self._partition = message.partition()  # type: ignore[assignment]  # set once delivered
            self._offset = message.offset()  # type: ignore[assignment]
            self._record(message.latency() or 0.0)
            self._done = True
            if self._event is not None or self._callbacks is not None:
                self._complete()
        else:
            self._stats.add_failed()
            self._fail(error, message)


if speedups is not None:
    from goka._speedups import DeliveryState, calibrate

    def _calibrate() -> bool:
        """Let the C callback read confluent-kafka's Message fields directly, if a probe built
        with the public constructor reads back right (else it calls the Message methods)."""
        partition, offset, latency_us = 123_457, 9_876_543_210_123, 375_000
        probe = probe_message(partition, offset, latency_us / 1e6)
        return probe is not None and calibrate(probe, partition, offset, latency_us)

    MESSAGE_FIELDS_READ_DIRECTLY = _calibrate()

    class CPending(DeliveryState, EmitterFuture):
        """The C future: goka._speedups.DeliveryState records the outcome in C and calls
        ``_complete`` only when someone waits or added a done-callback."""

        __slots__ = ()

else:  # (the pure-Python code: no C future)
    CPending = None  # type: ignore[assignment,misc]


F = TypeVar("F", bound=EmitterFuture)


def future_class(
    base: type[F], topic: str, stats: EmitterStats, interest: Callable[[], None]
) -> type[F]:
    """An emitter's own future class: its topic, stats and poll-thread wake-up as class
    attributes, so creating a future takes no arguments."""
    attributes = {"_topic": topic, "_stats": stats, "_record": stats.record,
                  "_interest": interest, "__slots__": ()}  # fmt: skip
    return type("_Pending", (base,), attributes)


class DeliveryServer:
    """Serves an emitter's delivery reports on a background thread, unless application
    threads are doing it.

    Threads calling emit() serve due reports themselves (a bare producer loop's poll(0)).
    While they keep doing so and nobody waits for a result, this thread stands back, looking
    every 5 ms: two threads serving at once fight over the GIL, which cost ~20% of emit
    throughput. A thread that starts waiting on a future (result(), emit_sync, await) sets
    :attr:`wake`, so waiting costs no extra latency; :attr:`space` is set when acknowledgements
    freed room in the producer's local queue.
    """

    def __init__(self, topic: str, poll: Callable[[float], int], stats: EmitterStats) -> None:
        self.topic, self._poll, self._stats = topic, poll, stats
        self.wake = threading.Event()
        self.space = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, *, served: Callable[[], int], serving: Callable[[], bool],
              closed: Callable[[], bool]) -> None:  # fmt: skip
        """Serve until ``closed()``: stand back while ``served()`` (how often application
        threads served) grows or ``serving()``, unless someone waits."""
        self._thread = threading.Thread(target=self._run, args=(served, serving, closed),
                                        name=f"goka-emitter-{self.topic}", daemon=True)  # fmt: skip
        self._thread.start()

    def _run(self, served: Callable[[], int], serving: Callable[[], bool],
             closed: Callable[[], bool]) -> None:  # fmt: skip
        poll, space, wake, stats = self._poll, self.space, self.wake, self._stats
        py_stats = stats if isinstance(stats, PyEmitterStats) else None
        last = -1
        while not closed():
            now = served()
            if (now != last or serving()) and not wake.is_set():
                last = now
                wake.wait(0.005)
                continue
            wake.clear()
            try:
                if poll(0.1):
                    space.set()
                if py_stats is not None and py_stats.pending > 100_000:
                    py_stats.fold()
            except Exception:  # a user's done-callback raised; keep serving the others
                log.exception("emitter %s: a delivery callback raised", self.topic)

    def join(self) -> None:
        """Wait for the thread to end (after ``closed()`` turned true)."""
        if self._thread is not None:
            self._thread.join()
