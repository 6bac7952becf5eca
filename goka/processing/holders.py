"""How a process asks another to release a store it holds open (LevelDB lets one process open a
directory): a datagram to the holder's inbox, a Unix socket in Linux's abstract namespace named
in ``<store>.holder`` (which the holder removes when it closes the store), and a file
``<store>.release`` for holders the datagram cannot reach (another network namespace, another
OS). See :mod:`goka.processing.leases` for what a holder does when asked.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sys
import time
from pathlib import Path

from goka.errors import StorageLockedError
from goka.storage import Storage, StorageBuilder

__all__ = [
    "ask_holder",
    "forget_holder",
    "open_inbox",
    "open_when_released",
    "release_held",
    "release_marker",
    "write_holder",
]


def open_when_released(
    builder: StorageBuilder, path: Path, table: str, deadline: float, ask: bool = True
) -> Storage:
    """Open the store, asking the process that holds it to release it (unless not ``ask``:
    then it raises at once)."""
    asked = 0.0
    while True:
        try:
            storage = builder(path, table)
        except StorageLockedError:
            now = time.monotonic()
            if now > deadline or not ask:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(release_marker(path))  # no one is waiting any more
                raise
            if now - asked > 0.05:  # (again: another waiter may have taken the request away)
                ask_holder(path)
                asked = now
            time.sleep(0.001)
            continue
        if asked:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(release_marker(path))
        return storage


def open_inbox() -> socket.socket | None:
    """This process's inbox for release requests (Linux; None elsewhere: files only)."""
    if not sys.platform.startswith("linux"):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(f"\0goka-worker-{os.getpid()}-{secrets.token_hex(8)}")
    return sock


def ask_holder(path: Path) -> None:
    """Ask whoever holds the store at ``path`` to release it: a datagram to the inbox named in
    ``<store>.holder`` (if it is reachable) and the file ``<store>.release``."""
    release_marker(path).touch()
    name = _holder_name(path)
    if name is not None:
        with contextlib.suppress(OSError, ValueError):  # gone, or in another namespace
            _send(path, name)


def write_holder(path: Path, address: str | bytes) -> None:
    """Name this process's inbox in ``<store>.holder`` (not for stores without a directory)."""
    name = address.decode() if isinstance(address, bytes) else address
    temporary = path.with_name(f"{path.name}.holder-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        temporary.write_text(name.lstrip("\0"))
        temporary.replace(holder_file(path))


def holder_file(path: Path) -> Path:
    """``<store>.holder``: names the inbox of the process holding the store open."""
    return path.with_name(path.name + ".holder")


def forget_holder(path: Path, address: str | bytes) -> None:
    """Remove ``<store>.holder`` if it names this process's inbox (the store was closed)."""
    name = (address.decode() if isinstance(address, bytes) else address).lstrip("\0")
    holder = holder_file(path)
    with contextlib.suppress(OSError):
        if holder.read_text() == name:
            holder.unlink()


def release_held(directory: Path, timeout: float = 5.0) -> list[Path]:
    """Ask the processes of this machine that hold stores under ``directory`` open to close
    them, and wait up to ``timeout`` seconds for them to (a query ended: nothing will use
    them, and its workers would keep them until their idle timeout). Holders that are gone
    are forgotten. A holder on another machine (a cluster's executor) is not reached: it
    closes the stores when they have been idle for its ``idle_timeout``.

    Returns:
        The stores still held when the time was up.
    """
    waiting: dict[Path, str] = {}
    for holder in directory.glob("*.holder"):
        store = holder.with_name(holder.name.removesuffix(".holder"))
        name = _holder_name(store)
        if name is None:
            continue
        try:
            _send(store, name)
            waiting[store] = name
        except (ConnectionRefusedError, FileNotFoundError):  # its process is gone
            forget_holder(store, name)
        except (OSError, ValueError):  # another namespace, a full inbox: it closes when idle
            continue
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        time.sleep(0.01)
        waiting = {p: n for p, n in waiting.items() if _holder_name(p) == n}
    return sorted(waiting)


def _send(store: Path, name: str) -> None:
    """Send a release request for ``store`` to the inbox ``name`` (raises OSError)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
        out.setblocking(False)
        out.sendto(os.fsencode(store), "\0" + name)


def _holder_name(path: Path) -> str | None:
    """The inbox named in ``<store>.holder`` (None: no holder file)."""
    try:
        return holder_file(path).read_text()
    except OSError:
        return None


def release_marker(path: Path) -> Path:
    """``<store>.release``: a request to release the store, for holders datagrams miss."""
    return path.with_name(path.name + ".release")
