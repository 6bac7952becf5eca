"""Goka's partitioner: FNV-1a 32-bit hash of the key, Sarama's rule for the partition."""

from __future__ import annotations

__all__ = ["fnv1a_32", "partition_for"]

_OFFSET_BASIS = 0x811C9DC5
_PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    """Return the 32-bit FNV-1a hash of ``data``."""
    h = _OFFSET_BASIS
    for byte in data:
        h = ((h ^ byte) * _PRIME) & 0xFFFFFFFF
    return h


def partition_for(key: bytes, partitions: int) -> int:
    """Return the partition Sarama's hash partitioner (and librdkafka's ``fnv1a``) picks.

    Sarama reads the hash as a signed 32-bit int, takes ``% partitions`` (Go keeps the sign)
    and negates a negative result: ``|int32(hash)| % partitions``.
    """
    h = fnv1a_32(key)
    signed = h - (1 << 32) if h & 0x80000000 else h
    return abs(signed) % partitions
