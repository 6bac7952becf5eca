"""The click-count demo, end to end (``make demo``).

On an embedded broker: the click-count processor group runs as a Spark Structured Streaming job
(its own process, ``goka processor run``), a view service serves its table over gRPC (its own
process, ``goka view serve``), and the web app emits a click per HTTP request with one shared
Emitter. The demo fires clicks at the web app, reads the counts back over gRPC, checks they equal
what was sent, and shuts everything down with SIGTERM. Then it archives the clicks to Parquet
files and, where PostgreSQL is installed, materialises the group table into a throwaway
PostgreSQL server, both with ``goka connect run`` (``examples/click_count/sinks.py``), and
checks the files hold every click once and the rows equal the clicks sent.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from examples.click_count.group import GROUP, TOPIC
from examples.click_count.web import WebApp
from goka import TopicManager
from goka.dev import EmbeddedBroker
from goka.grpc import ViewClient

TABLE = f"{GROUP}-table"
PARTITIONS = 4
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class DemoResult:
    """What a demo run saw."""

    sent: Counter[str]
    counts: dict[str, int]
    first_count_seconds: float = 0.0
    total_seconds: float = 0.0
    memory_mb: dict[str, tuple[float, float]] = field(default_factory=dict)  # RSS, PSS

    @property
    def ok(self) -> bool:
        """True when every count equals the clicks sent."""
        return self.counts == dict(self.sent)


class Service:
    """A goka command in its own process group, stopped with SIGTERM."""

    def __init__(self, name: str, args: list[str], workdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.http_url = ""  # the service's HTTP port (monitor), once read from its output
        self.log_path = workdir / f"{name}.log"
        self._log: IO[str] = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "goka.cli", *args], stdout=subprocess.PIPE,
            stderr=self._log, text=True, env=env, cwd=workdir, start_new_session=True,
        )  # fmt: skip

    def first_line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} exited early; see {self.log_path}")
        return line.strip()

    def check_running(self) -> None:
        """Raise if the process has exited."""
        code = self.process.poll()
        if code is not None:
            self._log.flush()
            tail = "\n".join(self.log_path.read_text().splitlines()[-15:])
            raise RuntimeError(f"{self.name} exited with {code}; the end of its log:\n{tail}")

    def memory_mb(self) -> tuple[float, float]:
        """Resident memory (RSS, PSS) of the process and its children (the JVM, Python
        workers)."""
        rss, pss = tree_memory(self.process.pid)
        return rss / 1024, pss / 1024

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._release()

    def _release(self) -> None:
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()

    def stop(self, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._release()
        return self.process.returncode


def process_memory(pid: int) -> tuple[float, float]:
    """RSS and PSS (kB) of ``pid``: PSS shares each shared page among the processes mapping it."""
    rss = pss = 0.0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = float(line.split()[1])
            elif line.startswith("Pss:"):
                pss = float(line.split()[1])
    except OSError:
        pass
    return rss, pss


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Linux /proc), breadth first: its children come first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found = list(children.get(pid, []))
    for below in found:  # grows while it is read
        found.extend(children.get(below, []))
    return found


def tree_memory(pid: int) -> tuple[float, float]:
    """Sums of RSS and PSS (kB) of ``pid`` and its descendants (Linux /proc). The RSS sum counts
    pages shared between them (the Python workers forked from one daemon) once per process."""
    rss = pss = 0.0
    for current in [pid, *descendants(pid)]:
        own = process_memory(current)
        rss, pss = rss + own[0], pss + own[1]
    return rss, pss


def start_processor(brokers: str, workdir: Path) -> Service:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GOKA_LOG_LEVEL": "WARNING"}
    return Service("processor", ["processor", "run", "examples.click_count.group:graph",
                                 "--brokers", brokers, "--state-dir", str(workdir / "state"),
                                 "--mode", "continuous", "--http-port", "0"],
                   workdir, env)  # fmt: skip


def start_view(brokers: str, workdir: Path) -> tuple[Service, str]:
    env = {**os.environ, "GOKA_LOG_LEVEL": "WARNING"}
    view = Service("view", ["view", "serve", "--table", TABLE, "--codec", "int64", "--brokers",
                            brokers, "--path", str(workdir / "views"), "--host", "127.0.0.1",
                            "--port", "0", "--http-port", "0"], workdir, env)  # fmt: skip
    address = view.first_line().split()[-1]  # "view server listening on HOST:PORT"
    view.http_url = view.first_line().split()[1]  # "http URL (...)"
    return view, address


def fire(url: str, clicks: int, users: int, seed: int = 7) -> Counter[str]:
    """POST ``clicks`` clicks for random users from 8 threads; return clicks per user."""
    rng = random.Random(seed)
    chosen = [f"user-{rng.randrange(users):02d}" for _ in range(clicks)]

    def post(user: str) -> None:
        request = urllib.request.Request(f"{url}/click/{user}?page=/home", method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 202

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(post, chosen))
    return Counter(chosen)


def read_counts(client: ViewClient, users: list[str]) -> dict[str, int]:
    try:
        return client.get_many(TABLE, users)
    except Exception:  # the view is still catching up (UNAVAILABLE)
        return {}


def wait_counts(client: ViewClient, sent: Counter[str], timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = read_counts(client, sorted(sent))
        if counts == dict(sent):
            break
        time.sleep(0.25)
    return counts


def run(brokers: str, workdir: Path, *, clicks: int = 3_000, users: int = 20,
        kill_processor_midway: bool = False,
        keep_running: threading.Event | None = None) -> DemoResult:  # fmt: skip
    """Run the whole pipeline against ``brokers``; see the module docstring."""
    started = time.monotonic()
    manager = TopicManager(brokers)
    manager.ensure_stream_exists(TOPIC, PARTITIONS)
    manager.ensure_table_exists(TABLE, PARTITIONS)
    processor = start_processor(brokers, workdir)
    processor_url = processor.first_line().split()[1]  # "http URL (...)"
    view, address = start_view(brokers, workdir)
    result = DemoResult(Counter(), {})
    try:
        with WebApp(brokers) as web, ViewClient(address) as client:
            print(f"processor monitor   {processor_url}/\n"
                  f"view monitor        {view.http_url}/\n"
                  f"table browser       {view.http_url}/browse?table={TABLE}\n"
                  f"emitter status      {web.url}/goka/emitters", flush=True)  # fmt: skip
            fired_at = time.monotonic()
            half = clicks // 2
            result.sent = fire(web.url, half, users)
            deadline = time.monotonic() + 180
            while not any(read_counts(client, sorted(result.sent)).values()):
                processor.check_running()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no count after 180 s; see {processor.log_path}")
                time.sleep(0.1)
            result.first_count_seconds = time.monotonic() - fired_at
            with ThreadPoolExecutor(1) as background:
                second = background.submit(fire, web.url, clicks - half, users, 8)
                if kill_processor_midway:  # SIGKILL while the second half is being processed
                    while sum(read_counts(client, sorted(result.sent)).values()) <= half:
                        time.sleep(0.05)
                    processor.kill()
                    processor = start_processor(brokers, workdir)
                result.sent += second.result()
            own_rss, own_pss = process_memory(os.getpid())
            result.memory_mb = {"processor": processor.memory_mb(), "view": view.memory_mb(),
                                "web app and demo": (own_rss / 1024, own_pss / 1024)}  # fmt: skip
            result.counts = wait_counts(client, result.sent, timeout=180)
            if keep_running is not None:
                print("everything stays up (--keep-running); Ctrl-C ends the demo", flush=True)
                keep_running.wait()
    finally:
        processor.stop()
        view.stop()
    result.total_seconds = time.monotonic() - started
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-running", action="store_true",
                        help="leave everything up after the run until Ctrl-C, to look at the "
                        "monitor pages")  # fmt: skip
    parser.add_argument("--broker", choices=["kafka", "tansu"], default="kafka",
                        help="the development broker (default: Apache Kafka)")  # fmt: skip
    args = parser.parse_args()
    stop: threading.Event | None = None
    if args.keep_running:
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    began = time.monotonic()
    with (
        EmbeddedBroker(args.broker) as broker,
        tempfile.TemporaryDirectory(prefix="goka-demo-") as scratch,
    ):
        print(f"{broker.name} broker at {broker.bootstrap}, started in "
              f"{time.monotonic() - began:.1f} s; starting processor (Spark), view server and web "
              "app...", flush=True)  # fmt: skip
        result = run(broker.bootstrap, Path(scratch), keep_running=stop)
        report(result)
        stored = materialise(broker.bootstrap, result.sent) if result.ok else True
    return 0 if result.ok and stored else 1


def report(result: DemoResult) -> None:
    """Print what the demo sent and counted."""
    print(f"\n{'user':<10} {'clicks sent':>12} {'count (gRPC view)':>18}")
    for user in sorted(result.sent):
        print(f"{user:<10} {result.sent[user]:>12} {result.counts.get(user, 0):>18}")
    total = sum(result.sent.values())
    first = result.first_count_seconds
    print(f"\n{total} clicks over HTTP; first count visible after {first:.1f} s; "
          f"total {result.total_seconds:.1f} s")  # fmt: skip
    print(
        "memory (RSS; PSS, shared pages split among processes): "
        + ", ".join(f"{k} {rss:,.0f} MB ({pss:,.0f})" for k, (rss, pss) in result.memory_mb.items())
    )
    print("counts equal clicks sent: " + ("OK" if result.ok else "MISMATCH"), flush=True)


def materialise(brokers: str, sent: Counter[str]) -> bool:
    """Archive ``user-clicks`` to Parquet and write ``clicks-table`` into a throwaway
    PostgreSQL server with the sinks of ``examples/click_count/sinks.py`` (``goka connect run
    ... --until-caught-up``), and check the files hold every click once and the rows equal
    the clicks sent. PostgreSQL is skipped where it is not installed."""
    from goka.dev.postgres import LocalPostgres, find_postgres

    with tempfile.TemporaryDirectory(prefix="goka-sink-") as work:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "CLICKS_ARCHIVE": f"{work}/archive",
               "GOKA_LOG_LEVEL": "WARNING"}  # fmt: skip
        archived = _connect(brokers, "archive", env, work)
        if archived is None:
            return False
        from goka.connect import read_table

        files = read_table(f"{work}/archive", columns=["key"]).column("key").to_pylist()
        equal = Counter(files) == sent
        print(f"Parquet archive of user-clicks (goka connect run, {archived:.1f} s): "
              f"{len(files)} clicks; every click once: "
              f"{'OK' if equal else 'MISMATCH'}")  # fmt: skip
        if find_postgres() is None:
            print("PostgreSQL is not installed: the clicks table is not materialised")
            return equal
        import psycopg

        with LocalPostgres() as server:
            took = _connect(brokers, "clicks", {**env, "CLICKS_DSN": server.dsn}, work)
            if took is None:
                return False
            with psycopg.connect(server.dsn) as conn:
                rows = dict(conn.execute("SELECT key, value FROM clicks").fetchall())
    same = rows == dict(sent)
    print(f"PostgreSQL table clicks (goka connect run, {took:.1f} s): {len(rows)} rows, "
          f"{sum(rows.values())} clicks; rows equal clicks sent: "
          f"{'OK' if same else 'MISMATCH'}")  # fmt: skip
    return equal and same


def _connect(brokers: str, sink: str, env: dict[str, str], work: str) -> float | None:
    """Run sink ``sink`` of the example until caught up; its seconds (None: it failed)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "goka", "connect", "run", f"examples.click_count.sinks:{sink}",
         "--brokers", brokers, "--checkpoint", str(Path(work) / f"checkpoint-{sink}"),
         "--until-caught-up"], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        print(f"goka connect run ...:{sink} failed:\n{done.stderr[-3000:]}")
        return None
    return time.monotonic() - started


if __name__ == "__main__":
    sys.exit(main())
