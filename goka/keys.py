"""Message keys: bytes on the wire, ``str`` in goka's API, with nothing lost either way.

Kafka keys are byte strings, and Go Goka's are too (a Go ``string`` holds any bytes). goka-py
gives keys to callbacks, views and stores as ``str``: UTF-8 text maps to the same bytes as Go's
string, and bytes that are not valid UTF-8 are carried as surrogate escapes (Python's
``surrogateescape`` error handler, as :func:`os.fsdecode` does for file names): byte ``0xff``
becomes ``"\\udcff"``. The mapping is one-to-one, so a key written by a Go service comes back
to Kafka byte for byte. Where a key is taken as input (emitters, ``ctx.emit``, views), ``bytes``
are accepted too.
"""

from __future__ import annotations

from collections.abc import Callable

from goka._accel import speedups
from goka.errors import CodecError, describe_key

__all__ = ["ERRORS", "decode_text", "describe_key", "key_bytes", "key_str"]

#: The error handler that maps any bytes to ``str`` and back (``bytes.decode``/``str.encode``).
ERRORS = "surrogateescape"


def _decode_text(data: bytes | bytearray | memoryview) -> str:
    return str(data, "utf-8", ERRORS)


#: ``data.decode("utf-8", "surrogateescape")`` for any buffer: in C where goka._speedups is
#: built (a third of the cost: no argument parsing per call), for hot loops.
decode_text: Callable[[bytes | bytearray | memoryview], str] = (
    speedups.text_lossless if speedups is not None else _decode_text
)


def key_str(key: str | bytes | bytearray | memoryview) -> str:
    """Return the ``str`` form of key bytes (lossless; see the module docstring); a ``str`` is
    returned as it is."""
    if isinstance(key, str):
        return key
    return decode_text(key)


def key_bytes(key: str | bytes) -> bytes:
    """Return the bytes of a key given as ``str`` (surrogate escapes back to their bytes) or bytes.

    Raises:
        CodecError: the key is neither, or holds a surrogate that stands for no byte (only
            ``U+DC80``-``U+DCFF`` do).
    """
    if isinstance(key, bytes):
        return key
    if not isinstance(key, str):
        raise CodecError("key", f"expected str or bytes, got {type(key).__name__}")
    try:
        return key.encode("utf-8", ERRORS)
    except UnicodeEncodeError as exc:
        raise CodecError("key", f"key {key!r} has no byte form: {exc.reason}") from exc
