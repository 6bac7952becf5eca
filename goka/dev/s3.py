"""An S3 API server for development and tests: S3Proxy (``org.gaul:s3proxy``, Apache-2.0) on
its filesystem backend, its jars fetched once from Maven Central like Apache Kafka's.

A real server over HTTP on loopback (signatures V2 and V4, multipart uploads, listings), not an
in-process mock: what talks to it is the same botocore/s3fs code that talks to AWS S3, MinIO,
Ceph or R2. Its objects are files in a folder of its own::

    with LocalS3() as s3:
        bucket = s3.make_bucket()
        fs = s3fs.S3FileSystem(**s3.storage_options)
        # or, for another process: os.environ.update(s3.env)

Known quirk of the server (seen with S3Proxy 2.6.0): ``GetBucketLocation`` answers for a bucket
that does not exist, so ``s3fs``'s ``exists("bucket")`` is True for any name; probe a bucket with
a listing (:func:`goka.storage.urls.check_location` does).
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any

from goka.dev.kafka import cache_root, find_java, maven_jars, scratch_folder
from goka.dev.process import BrokerProcess, Started, free_port
from goka.errors import BrokerNotFoundError

__all__ = ["S3PROXY_VERSION", "LocalS3", "s3proxy_libs"]

#: The S3Proxy release the development server runs (its whole tree resolves from Maven Central).
S3PROXY_VERSION = "2.6.0"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.goka</groupId>
  <artifactId>s3proxy-libs</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.gaul</groupId><artifactId>s3proxy</artifactId><version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""

#: The server's log: its own INFO lines and warnings, without Jetty's per-request DEBUG chatter
#: (logback's default when no configuration is given).
_LOGBACK = """<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>[%d] %level %msg \\(%logger{20}\\)%n</pattern></encoder>
  </appender>
  <logger name="org.gaul.shaded" level="WARN"/>
  <logger name="org.eclipse.jetty" level="WARN"/>
  <root level="INFO"><appender-ref ref="out"/></root>
</configuration>
"""

_names = itertools.count()

#: botocore's checksums only where S3 requires them: S3Proxy 2.6.0 (as some other S3-compatible
#: stores) refuses the CRC32 headers botocore 1.36+ adds to every upload ("NotImplemented: A
#: header you provided implies functionality that is not implemented").
_CHECKSUMS = {
    "request_checksum_calculation": "when_required",
    "response_checksum_validation": "when_required",
}


def s3proxy_libs(version: str = S3PROXY_VERSION, *, cache: Path | None = None) -> Path:
    """Return the folder of S3Proxy ``version``'s jars, fetching them with Maven the first time
    (into ``cache``, default :func:`goka.dev.kafka.cache_root`).

    Raises:
        BrokerNotFoundError: the jars are not there and Maven is not installed.
        BrokerError: Maven could not resolve them (its last lines and the command to retry).
    """
    libs = (cache or cache_root()) / f"s3proxy-{version}" / "libs"
    return maven_jars(f"S3Proxy {version}", libs, _POM.format(version=version))


class LocalS3(Started):
    """An S3 API server on 127.0.0.1 (S3Proxy, filesystem backend), for development and tests.

    Args:
        port: its port (default: a free one).
        access_key, secret_key: the one identity it accepts (signature V2 or V4).
        region: the region clients are told to sign for.
        data_dir: where its buckets are folders (default: a new folder, removed by :meth:`stop`).
        heap: the JVM's maximum heap.
        nice: its scheduling priority's increment (``nice -n``; a bench on few cores runs
            it at 19, as a store elsewhere would take none of them).

    Raises:
        BrokerNotFoundError: at :meth:`start`, no Java, or no jars and no Maven to fetch them.
    """

    def __init__(self, *, port: int | None = None, access_key: str = "goka-dev",
                 secret_key: str = "goka-dev-secret", region: str = "us-east-1",
                 data_dir: Path | None = None, heap: str = "256m",
                 nice: int = 0) -> None:  # fmt: skip
        self.port = port or free_port()
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.heap, self.nice = heap, nice
        self._own_dir = data_dir is None
        self.workdir = scratch_folder("goka-s3-") if data_dir is None else Path(data_dir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "buckets").mkdir(exist_ok=True)
        self.log_path = self.workdir / "s3proxy.log"
        self._process = BrokerProcess(f"S3Proxy {S3PROXY_VERSION} server", self.log_path,
                                      grace=5.0)  # fmt: skip

    @property
    def endpoint(self) -> str:
        """The server's URL (``http://127.0.0.1:PORT``): ``endpoint_url`` of S3 clients."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options that reach this server (``storage_options=`` of goka-py)."""
        return {
            "key": self.access_key, "secret": self.secret_key, "endpoint_url": self.endpoint,
            "client_kwargs": {"region_name": self.region}, "config_kwargs": dict(_CHECKSUMS),
        }  # fmt: skip

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables that point another process (a processor, Spark's
        workers, the CLI) at this server."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
                "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required"}  # fmt: skip

    @property
    def running(self) -> bool:
        return self._process.running

    def start(self, timeout: float = 60.0) -> LocalS3:
        """Start the server and wait until it answers HTTP (about 1.5 s once the jars are
        there; their first fetch takes longer).

        Raises:
            BrokerNotFoundError: no Java, or no jars and no Maven.
            BrokerError: it exited or did not answer within ``timeout`` (its log's last lines).
        """
        try:
            java = find_java()
        except BrokerNotFoundError as exc:
            raise BrokerNotFoundError(f"the S3 development server (S3Proxy) needs Java: "
                                      f"{exc}") from None  # fmt: skip
        libs = s3proxy_libs()
        settings = self.workdir / "s3proxy.properties"
        settings.write_text(
            f"s3proxy.endpoint={self.endpoint}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={self.access_key}\n"
            f"s3proxy.credential={self.secret_key}\n"
            "jclouds.provider=filesystem-nio2\n"
            "jclouds.identity=local\njclouds.credential=local\n"
            f"jclouds.filesystem.basedir={self.workdir / 'buckets'}\n"
        )
        (self.workdir / "logback.xml").write_text(_LOGBACK)
        command = [java, f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   f"-Dlogback.configurationFile={self.workdir / 'logback.xml'}",
                   "-cp", f"{libs}/*", "org.gaul.s3proxy.Main",
                   "--properties", str(settings)]  # fmt: skip
        self._process.start(["nice", "-n", str(self.nice), *command] if self.nice else command)
        self._process.wait_ready(self._answers, timeout, f"its settings: {settings}")
        return self

    def _answers(self, left: float) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=min(left, 1.0)) as s:
                s.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                return s.recv(12).startswith(b"HTTP/")
        except OSError:
            return False

    def client(self) -> Any:
        """A botocore S3 client of this server (for tests and set-up)."""
        import botocore.session  # imported here: the 's3' extra
        from botocore.config import Config

        return botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(**_CHECKSUMS),
        )  # fmt: skip

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket (default: a new unique name) and return its name."""
        name = name or f"goka-{os.getpid()}-{next(_names)}-{uuid.uuid4().hex[:6]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        """Stop the server; remove its folder if it made it. Idempotent."""
        self._process.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server (its objects stay: start it again on the same folder)."""
        self._process.kill()

    def log_tail(self, lines: int = 30) -> str:
        return self._process.log_tail(lines)

    def __repr__(self) -> str:
        return f"LocalS3({self.endpoint}, {'running' if self.running else 'stopped'})"
