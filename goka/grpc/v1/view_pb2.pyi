from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetRequest(_message.Message):
    __slots__ = ("table", "key")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    table: str
    key: bytes
    def __init__(self, table: _Optional[str] = ..., key: _Optional[bytes] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("found", "value", "codec")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    codec: str
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ..., codec: _Optional[str] = ...) -> None: ...

class GetManyRequest(_message.Message):
    __slots__ = ("table", "keys")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    table: str
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, table: _Optional[str] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("key", "found", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    found: bool
    value: bytes
    def __init__(self, key: _Optional[bytes] = ..., found: _Optional[bool] = ..., value: _Optional[bytes] = ...) -> None: ...

class GetManyResponse(_message.Message):
    __slots__ = ("entries", "codec")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    codec: str
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., codec: _Optional[str] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ("table", "prefix", "start", "stop", "limit", "reverse")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    table: str
    prefix: bytes
    start: bytes
    stop: bytes
    limit: int
    reverse: bool
    def __init__(self, table: _Optional[str] = ..., prefix: _Optional[bytes] = ..., start: _Optional[bytes] = ..., stop: _Optional[bytes] = ..., limit: _Optional[int] = ..., reverse: _Optional[bool] = ...) -> None: ...

class ScanResponse(_message.Message):
    __slots__ = ("entries", "codec")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    codec: str
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., codec: _Optional[str] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ("table",)
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: str
    def __init__(self, table: _Optional[str] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("partition", "offset", "high_watermark", "lag")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    high_watermark: int
    lag: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., lag: _Optional[int] = ...) -> None: ...

class TableInfo(_message.Message):
    __slots__ = ("table", "state", "recovered", "codec", "applied", "partitions")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    table: str
    state: str
    recovered: bool
    codec: str
    applied: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    def __init__(self, table: _Optional[str] = ..., state: _Optional[str] = ..., recovered: _Optional[bool] = ..., codec: _Optional[str] = ..., applied: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ...) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("tables",)
    TABLES_FIELD_NUMBER: _ClassVar[int]
    tables: _containers.RepeatedCompositeFieldContainer[TableInfo]
    def __init__(self, tables: _Optional[_Iterable[_Union[TableInfo, _Mapping]]] = ...) -> None: ...
