"""A throwaway PostgreSQL server for development and tests, from the system's PostgreSQL
(Debian's ``postgresql`` package: ``/usr/lib/postgresql/<version>/bin``).

``initdb`` and ``pg_ctl`` refuse to run as root: as root, the cluster belongs to ``nobody``
(through ``runuser``). The server listens on a Unix socket in its directory only (no TCP
port), without fsync (a test server: a restart keeps every commit, as the processes stop but
the machine does not), with ``wal_level=logical`` (change data capture)::

    with LocalPostgres() as server:
        psycopg.connect(server.dsn)
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from goka.dev.process import Started
from goka.errors import ConfigurationError

__all__ = ["LocalPostgres", "find_postgres"]

#: Where to look for the server's programs when ``initdb`` is not on the PATH.
_DEBIAN = "/usr/lib/postgresql/*/bin"


def find_postgres() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl`` (the newest Debian version first), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob(f"{_DEBIAN}/initdb"), key=_version, reverse=True)
    return Path(versions[0]).parent if versions else None


def _version(path: str) -> int:
    try:
        return int(Path(path).parent.parent.name)
    except ValueError:
        return 0


class LocalPostgres(Started):
    """A PostgreSQL cluster in a temporary directory, started on a Unix socket; removed when
    stopped.

    Args:
        user: the superuser's name (trust authentication on the socket).
        database: the database :attr:`dsn` names (created if not ``postgres``).
        bin_dir: where ``initdb`` and ``pg_ctl`` are (default: :func:`find_postgres`).

    Raises:
        ConfigurationError: PostgreSQL's programs are not installed.
    """

    def __init__(self, *, user: str = "goka", database: str = "goka",
                 bin_dir: Path | None = None) -> None:  # fmt: skip
        found = bin_dir or find_postgres()
        if found is None:
            raise ConfigurationError(
                "PostgreSQL is not installed (no initdb on the PATH or in "
                f"{_DEBIAN}): apt-get install postgresql"
            )
        self.bin_dir, self.user, self.database = found, user, database
        self.root: Path | None = None
        self.port = 5432

    @property
    def dsn(self) -> str:
        """The libpq connection string of :attr:`database`."""
        assert self.root is not None, "not started"
        return (
            f"host={self.root / 'socket'} port={self.port} user={self.user} dbname={self.database}"
        )

    def start(self) -> LocalPostgres:
        """Create the cluster and start the server (about a second).

        Raises:
            RuntimeError: initdb or the server failed (with its log).
        """
        self.root = Path(tempfile.mkdtemp(prefix="goka-postgres-"))
        os.chmod(self.root, 0o755)
        for name in ("data", "socket"):
            (self.root / name).mkdir()
            if os.geteuid() == 0:
                shutil.chown(self.root / name, "nobody")
        self.port = _free_port()
        self._run("initdb", "-D", str(self.root / "data"), "-U", self.user, "--auth=trust",
                  "-E", "UTF8", "--no-sync")  # fmt: skip
        self._start()
        if self.database != "postgres":
            import psycopg

            with psycopg.connect(self.dsn.replace(f"dbname={self.database}", "dbname=postgres"),
                                 autocommit=True) as conn:  # fmt: skip
                conn.execute(f'CREATE DATABASE "{self.database}"')
        return self

    def stop(self) -> None:
        """Stop the server at once and remove its directory. Idempotent."""
        if self.root is None:
            return
        with contextlib.suppress(RuntimeError):  # not running
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def restart(self) -> None:
        """Stop the server at once and start it again on the same data (a crash and recovery,
        for tests of a database that goes away)."""
        assert self.root is not None, "not started"
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "stop")
        self._start()

    def _start(self) -> None:
        assert self.root is not None
        options = (f"-k {self.root / 'socket'} -p {self.port} -c listen_addresses='' "
                   "-c fsync=off -c full_page_writes=off "
                   "-c wal_level=logical -c max_replication_slots=32 "
                   "-c max_wal_senders=8")  # fmt: skip
        self._run("pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "socket/log"),
                  "-w", "-o", options, "start")  # fmt: skip

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "nobody", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            log = self.root / "socket/log" if self.root else None
            tail = log.read_text()[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr[-2000:]}"
                               f"{tail}")  # fmt: skip

    def __repr__(self) -> str:
        return f"LocalPostgres({self.dsn if self.root else 'stopped'})"


def _free_port() -> int:
    """A port number for the socket's name (no TCP port is opened)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
