"""S3 on loopback: S3Proxy, pinned in ``ordo/broker/s3proxy-pom.xml``, fetched once by Maven, and its launcher.

The tests of tables on object storage (tests/cluster) and a developer
(``python -m ordo.broker.s3proxy serve --bucket lake``) run a real S3 server
here: S3Proxy (``org.gaul:s3proxy``, Apache-2.0) answers the S3 REST API,
signatures checked, over HTTP on a free loopback port. Why this one: it comes
from Maven Central in a minute, like the pinned Kafka (``fetch``), and runs in
a small JVM; MinIO is under the AGPL and, like SeaweedFS, takes tens of minutes
to build from its Go modules on a small machine. Mocks (moto) do not count.

Two of its storage backends serve here (``backend=``):

``transient`` (the default)
    objects in the server's memory, gone when it stops. Spark's S3A works
    against it fully: Spark's committers, streaming checkpoints, listings.
``filesystem-nio2``
    objects in a directory that outlives the server (``data_dir``), for the
    fault tests that kill S3 and start it again. It lists the directory
    markers S3A makes (``mkdirs``) without a size, which S3A's listing cannot
    take (a NullPointerException in ``S3Object.size()``): ordo's own files are
    fine (pyarrow writes no markers, Spark reads them by path), but Spark's
    own committers and checkpoints are not. The older ``filesystem`` backend
    is deprecated and breaks S3A's directory handling too.

S3Proxy 2.6.0 does not check the trailing checksums AWS SDKs send by default
since 2025, so ``environment()`` sets ``AWS_REQUEST_CHECKSUM_CALCULATION`` and
``AWS_RESPONSE_CHECKSUM_VALIDATION`` to ``when_required`` (the AWS SDKs' own
variables), and ``hadoop_settings()`` turns off S3A's bulk delete, which the
server answers with 501.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from ordo.broker.kafka import cache_root, java_command, maven_command
from ordo.broker.maven import fetch_runtime, installed, pinned_version
from ordo.broker.tansu import free_port
from ordo.kernel.errors import OrdoError

log = logging.getLogger(__name__)

S3PROXY_POM = Path(__file__).with_name("s3proxy-pom.xml")
BACKENDS = ("transient", "filesystem-nio2")
DEFAULT_REGION = "us-east-1"
DEFAULT_START_TIMEOUT = 120.0
JVM_OPTIONS: tuple[str, ...] = ("-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError")
LOGBACK = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="OUT"/></root>
</configuration>
"""
MAIN = "org.gaul.s3proxy.Main"


class S3ProxyError(OrdoError):
    """Raised when S3Proxy cannot be fetched or run here (no Java or Maven, a failed download, a start that fails)."""


def s3proxy_version(pom: Path = S3PROXY_POM) -> str:
    """The pinned S3Proxy release (``s3proxy.version`` in ``ordo/broker/s3proxy-pom.xml``)."""
    return pinned_version(pom, "s3proxy.version", S3ProxyError)


def s3proxy_home(version: str | None = None) -> Path:
    """The cache directory of one release (``<cache>/s3proxy-<version>``, with ``libs/`` inside)."""
    return cache_root() / f"s3proxy-{version or s3proxy_version()}"


def fetch(echo: Callable[[str], None] | None = None, pom: Path = S3PROXY_POM) -> Path:
    """Fetch the pinned release into the cache unless it is there; returns its ``libs`` directory."""
    version = s3proxy_version(pom)
    libs = installed(s3proxy_home(version))
    if libs is not None:
        return libs
    try:
        java_command()
        mvn = maven_command()
    except OrdoError as exc:
        raise S3ProxyError(str(exc).replace("Apache Kafka", "S3Proxy")) from None
    what = f"S3Proxy {version}"
    return fetch_runtime(mvn, pom, s3proxy_home(version), f"s3proxy-{version}.jar", what, S3ProxyError, echo)


_LIVE: set[S3ProxyServer] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _kill_left_over() -> None:
    """Kill every server still running at interpreter exit (an interrupted test run)."""
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server.kill()


class S3ProxyServer:
    """One S3Proxy process on ``host``: ``start()``, ``stop()``, ``kill()`` (a crash), ``start()`` again.

    ``access_key``/``secret_key`` are the one identity it accepts (a random
    secret unless given). The port is chosen at the first start and kept, so a
    restart answers at the same endpoint (with the same objects only on
    ``filesystem-nio2``).
    """

    def __init__(
        self,
        *,
        backend: str = "transient",
        data_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        access_key: str = "ordo",
        secret_key: str | None = None,
        heap: str = "1g",
        start_timeout: float = DEFAULT_START_TIMEOUT,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise S3ProxyError(f"unknown S3Proxy backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        self.backend = backend
        self.host = host
        self.port = port
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_hex(16)
        self.heap = heap
        self.start_timeout = start_timeout
        self.echo = echo
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="ordo-s3proxy-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "s3proxy.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 20) -> str:
        """The last lines of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def start(self) -> S3ProxyServer:
        """Start the server (fetching S3Proxy first, once) and return once it answers HTTP."""
        if self.running:
            return self
        libs = fetch(echo=self.echo)
        self.port = self.port or free_port(self.host)
        conf = self.data_dir / "s3proxy.properties"
        (self.data_dir / "blobs").mkdir(parents=True, exist_ok=True)
        conf.write_text(self._properties())
        (self.data_dir / "logback.xml").write_text(LOGBACK)
        command = [
            java_command(),
            *JVM_OPTIONS,
            f"-Xmx{self.heap}",
            f"-Dlogback.configurationFile={self.data_dir / 'logback.xml'}",
            "-cp",
            str(libs / "*"),
            MAIN,
            "--properties",
            str(conf),
        ]
        with open(self.log_path, "ab") as out:
            out.write(f"\n---- ordo.broker.s3proxy: starting at {time.ctime()}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        log.info("S3Proxy (%s) ready at %s", self.backend, self.endpoint)
        return self

    def _properties(self) -> str:
        lines = {
            "s3proxy.endpoint": self.endpoint,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key,
            "s3proxy.credential": self.secret_key,
            "jclouds.provider": self.backend,
            "jclouds.identity": "ordo",
            "jclouds.credential": "ordo",
            "jclouds.filesystem.basedir": str(self.data_dir / "blobs"),
        }
        return "".join(f"{key}={value}\n" for key, value in lines.items())

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            if not self.running:
                raise S3ProxyError(f"S3Proxy exited before it answered; log {self.log_path}:\n{self.tail()}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=2).close()
                return
            except urllib.error.HTTPError:
                return  # an S3 error document (403 for an unsigned request): it answers
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise S3ProxyError(f"S3Proxy did not answer within {self.start_timeout:.0f} s; log:\n{self.tail()}")
            time.sleep(0.2)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); a temporary data directory is removed."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._forget()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL, as a crash would; the data directory stays (``start()`` again serves it on ``filesystem-nio2``)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self._forget()

    def _forget(self) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self)

    # ------------------------------------------------------------------ how clients reach it

    def environment(self) -> dict[str, str]:
        """The AWS variables that point an AWS SDK, pyarrow and (through ordo) Spark's S3A at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": DEFAULT_REGION,
            "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
            "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
        }

    @staticmethod
    def hadoop_settings() -> dict[str, str]:
        """S3A settings this server needs beyond the endpoint ordo maps (``kernel.objectstore``)."""
        return {"fs.s3a.multiobjectdelete.enable": "false"}

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (no error if it exists)."""
        from pyarrow import fs

        from ordo.kernel.objectstore import S3Options

        options = S3Options(endpoint=self.endpoint, region=DEFAULT_REGION, path_style=True)
        arrow = options.arrow_options() | {"access_key": self.access_key, "secret_key": self.secret_key}
        filesys = fs.S3FileSystem(**arrow, allow_bucket_creation=True)
        with _checksums_when_required():
            filesys.create_dir(name)

    def __enter__(self) -> S3ProxyServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"S3ProxyServer({self.backend}, {self.endpoint}, {state})"


class _checksums_when_required:
    """The checksum variables S3Proxy needs, set for one call (pyarrow's SDK reads them when a client is made)."""

    KEYS = ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION")

    def __enter__(self) -> None:
        self.saved = {k: os.environ.get(k) for k in self.KEYS}
        os.environ.update(dict.fromkeys(self.KEYS, "when_required"))

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main(argv: list[str] | None = None) -> int:
    """``fetch``: the jars into the cache; ``serve``: a server until Ctrl-C, printing the variables that reach it."""
    parser = argparse.ArgumentParser(prog="python -m ordo.broker.s3proxy", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="fetch the pinned S3Proxy into ~/.cache/ordo (Maven)")
    serve = sub.add_parser("serve", help="run S3Proxy on loopback until Ctrl-C")
    serve.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    serve.add_argument("--bucket", action="append", default=[], help="bucket to create (repeatable)")
    serve.add_argument("--backend", choices=BACKENDS, default="transient")
    serve.add_argument("--data", help="data directory (filesystem-nio2 keeps objects there)")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch(echo=lambda text: print(text, file=sys.stderr)))
            return 0
        server = S3ProxyServer(backend=args.backend, data_dir=args.data, port=args.port, echo=print)
        with server:
            for bucket in args.bucket:
                server.create_bucket(bucket)
            print(f"S3Proxy ({args.backend}) at {server.endpoint}; buckets: {', '.join(args.bucket) or 'none'}")
            print("# point clients at it (pyarrow, AWS SDKs; ordo maps these for Spark's S3A):")
            for key, value in server.environment().items():
                print(f"export {key}={value}")
            print("# Ctrl-C stops it" + (" (and drops every object)" if args.backend == "transient" else ""))
            while server.running:
                time.sleep(0.5)
            print(f"S3Proxy exited:\n{server.tail()}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0
    except S3ProxyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
