"""Processes of a Spark session and their listening sockets, read from Linux's /proc (for
tests and their subprocesses)."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path


def parent(pid: int | str) -> int | None:
    """The parent process id of ``pid``; None if it exited meanwhile."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (ppid := parent(entry.name)) is not None:
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:  # exited meanwhile
            continue
    return inodes


def listening(pids: set[int]) -> list[str]:
    """``address:port`` of every TCP socket in LISTEN state that one of ``pids`` holds."""
    inodes, found = _socket_inodes(pids), []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            (host, port), state, inode = fields[1].split(":"), fields[3], fields[9]
            if state == "0A" and inode in inodes:
                found.append(f"{_address(host)}:{int(port, 16)}")
    return found


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])  # little-endian
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    address = ipaddress.IPv6Address(words)
    return address.ipv4_mapped or address
