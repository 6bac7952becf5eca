"""The images' figures: size and layers of the full and slim targets; the click-count processor
from the full image against the same processor from this machine's virtualenv, in the same run:
seconds from start to the first count and memory.

Each run: a fresh embedded broker, one click emitted as the processor starts, then the time
until its count is in ``clicks-table``; then 2,000 more clicks and the memory (RSS and PSS of the
processor's processes: Python, the Spark JVM, its Python workers) once they are counted. The
container runs with buildah (``tools.containers``) as the image's user with its state on a
mounted directory; the baseline is ``goka processor run`` from ``.venv``. The last line:
``image/venv start: min X median Y max Z``.

    python -m bench.image [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import add_broker, start_broker, summary
from examples.click_count.demo import tree_memory
from examples.click_count.group import GROUP, TOPIC
from goka import Emitter, Int64Codec, StringCodec, TopicManager
from goka.view import View
from tools.containers import Container
from tools.image import BASE, build

ROOT = Path(__file__).resolve().parents[1]
TABLE = f"{GROUP}-table"
CLICKS = 2_000


def image_facts(tag: str) -> str:
    """Size (MB, uncompressed) of image ``tag`` and of each of its layers, with what made it."""
    inspect = ["buildah", "inspect", "--type", "image", tag]
    found = json.loads(subprocess.run(inspect, capture_output=True, text=True, check=True).stdout)
    sizes = [layer["size"] for layer in json.loads(found["Manifest"])["layers"]]
    steps = [step.get("created_by", "") for step in found["OCIv1"]["history"]
             if not step.get("empty_layer")]  # fmt: skip
    lines = [f"{tag}: {sum(sizes) / 1e6:,.0f} MB in {len(sizes)} layers"]
    for size, step in zip(sizes, steps, strict=False):
        lines.append(f"  {size / 1e6:8,.1f} MB  {' '.join(step.split())[:90]}")
    return "\n".join(lines)


#: Starts a processor: ``start(brokers, state)`` -> (its main process ID, how to stop it).
Start = Callable[[str, Path], tuple[Callable[[], int | None], Callable[[], None]]]


def one_run(start: Start, work: Path, broker_kind: str = "kafka") -> tuple[float, float, float]:
    """Start a processor with ``start``; return seconds to the first count, and RSS and PSS
    (MB) once ``CLICKS`` more are counted."""
    with start_broker(broker_kind) as broker:
        brokers = broker.bootstrap
        topics = TopicManager(brokers)
        topics.ensure_stream_exists(TOPIC, 4)
        topics.ensure_table_exists(TABLE, 4)
        state = work / f"state-{time.monotonic_ns()}"
        state.mkdir()
        os.chown(state, 10001, 10001)
        started = time.monotonic()
        pid, stop = start(brokers, state)
        try:
            with Emitter(brokers, TOPIC, StringCodec()) as emitter:
                emitter.emit("user-0", "/first")
                with View(brokers, TABLE, Int64Codec()) as view:
                    view.wait_recovered(60)
                    _wait(lambda: view.get("user-0") == 1, 240)
                    first = time.monotonic() - started
                    for i in range(CLICKS):
                        emitter.emit(f"user-{1 + i % 50}", "/page")
                    emitter.flush()
                    _wait(lambda: sum(v for _, v in view.items()) == CLICKS + 1, 240)
            main = pid()
            assert main is not None, "the processor is not running"
            rss, pss = tree_memory(main)
        finally:
            stop()
    return first, rss / 1024, pss / 1024


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the processor did not count in time")
        time.sleep(0.05)


def processor_args(brokers: str, state: str) -> list[str]:
    return ["processor", "run", "examples.click_count.group:graph", "--brokers", brokers,
            "--state-dir", state, "--http-port", "0"]  # fmt: skip


def in_container(image: str, work: Path) -> Start:
    def start(brokers: str, state: Path) -> tuple[Callable[[], int | None], Callable[[], None]]:
        container = Container(image, processor_args(brokers, "/state/p"),
                              log=work / "container.log", volumes={state: "/state"})  # fmt: skip

        def stop() -> None:
            container.stop(60)
            container.remove()

        return container.main_pid, stop

    return start


def in_venv(work: Path) -> Start:
    def start(brokers: str, state: Path) -> tuple[Callable[[], int | None], Callable[[], None]]:
        with (work / "venv.log").open("wb") as log:
            goka = str(Path(sys.executable).parent / "goka")
            process = subprocess.Popen(
                [goka, *processor_args(brokers, str(state / "p"))],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip

        def stop() -> None:
            process.terminate()
            process.wait(60)

        return lambda: process.pid, stop

    return start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    add_broker(parser)
    args = parser.parse_args(argv)
    started = time.monotonic()
    images = {target: build(target, quiet=True) for target in ("full", "slim")}
    print(f"images built (or found current) in {time.monotonic() - started:.0f} s")
    for tag in (BASE, *images.values()):
        print(image_facts(tag))
    ratios = []
    with tempfile.TemporaryDirectory(prefix="goka-bench-image-") as work:
        for run in range(args.runs):
            measured = {}
            for name, start in (("image", in_container(images["full"], Path(work))),
                                ("venv", in_venv(Path(work)))):  # fmt: skip
                measured[name] = one_run(start, Path(work), args.broker)
                first, rss, pss = measured[name]
                print(f"run {run + 1} {name:5}: first count {first:5.1f} s, "
                      f"RSS {rss:,.0f} MB, PSS {pss:,.0f} MB", flush=True)  # fmt: skip
            ratios.append(measured["image"][0] / measured["venv"][0])
    print(f"image/venv start: {summary(ratios)}")


if __name__ == "__main__":
    main()
