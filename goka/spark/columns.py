"""Arrow columns from Python lists, built from their buffers.

Why not ``pa.array``: for every list it is given, pyarrow asks whether the list is a pandas
object, and the first such question imports pandas (about 55 MB and 0.4 s in each Python
worker, which otherwise never needs it). The columns a processor's tasks return (summaries,
range rows) are non-null integers, floats and strings: their buffers are simple to lay out.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["column", "record_batch"]

#: The ``array`` type code of each fixed-width Arrow type (native byte order, as Arrow's).
_CODES = {"int32": "i", "int64": "q", "double": "d"}


def column(values: Sequence[int] | Sequence[float] | Sequence[str], type: pa.DataType) -> pa.Array:
    """The Arrow array of ``values`` (no nulls) of ``type``: int32, int64, double or string.

    Raises:
        TypeError: another type, or a value that does not fit it.
    """
    import pyarrow as pa

    if type == pa.string():
        data = [str.encode(v) for v in values]  # type: ignore[arg-type]  # str, as documented
        ends = array.array("i", itertools.accumulate(map(len, data), initial=0))
        buffers = [None, pa.py_buffer(ends), pa.py_buffer(b"".join(data))]
        return pa.Array.from_buffers(type, len(data), buffers)
    code = _CODES.get(str(type))
    if code is None:
        raise TypeError(f"no column of {type} from a list here: int32, int64, double or string")
    return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(array.array(code, values))])


def record_batch(columns: Sequence[Sequence[int] | Sequence[float] | Sequence[str]],
                 schema: pa.Schema) -> pa.RecordBatch:  # fmt: skip
    """A record batch of ``schema`` whose fields hold ``columns`` (see :func:`column`)."""
    import pyarrow as pa

    arrays = [column(values, field.type) for values, field in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
