"""Table locations on object storage: one spelling, ``s3://bucket/prefix``, for Spark and for pyarrow.

Spark (Hadoop) reaches S3 through S3A, whose scheme is ``s3a://``; pyarrow's
``S3FileSystem`` knows ``s3://`` only (``FileSystem.from_uri("s3a://...")``
fails with ``Unrecognized filesystem type``). A table's location is stored in
its canonical spelling ``s3://`` (``s3a://`` and ``s3n://`` are accepted and
mean the same bucket and key); ``spark_path`` gives Spark its ``s3a://`` path
and ``filesystem`` gives pyarrow its filesystem and ``bucket/key`` path.

Where the endpoint, region, path-style addressing and credentials come from
(``S3Options.resolve``), each the first found:

1. Hadoop's ``fs.s3a.*`` settings, when the caller has them (the driver reads
   its Spark session's: ``fs.s3a.endpoint``, ``fs.s3a.endpoint.region``,
   ``fs.s3a.path.style.access``, ``fs.s3a.access.key``/``secret.key``/``session.token``);
2. the AWS variables: ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``,
   ``AWS_REGION``, ``AWS_DEFAULT_REGION`` (credentials: ``AWS_ACCESS_KEY_ID``,
   ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, read by the AWS SDKs);
3. the AWS profile (``AWS_PROFILE``, else ``default``) in ``AWS_CONFIG_FILE``
   (``~/.aws/config``): ``endpoint_url``, ``region`` and ``s3 = addressing_style``.

Path-style addressing (``http://host/bucket/key``) is what S3-compatible
servers want; it is used when a profile or Hadoop says so, or else whenever an
endpoint is given (pyarrow's own rule). Credentials other than Hadoop's are
left to the AWS SDK's default chain (variables, profile, instance role) in
each process, so executors get them from their own node. Secrets are never in
a repr, a log line or ``describe()``.
"""

from __future__ import annotations

import configparser
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

S3_SCHEMES = ("s3", "s3a", "s3n")
CANONICAL_SCHEME = "s3"
SPARK_SCHEME = "s3a"
_S3_URI = re.compile(r"^(s3|s3a|s3n)://", re.IGNORECASE)
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
HIDDEN = "***"
# The fs.s3a.* keys ordo maps, and the AWS SDK v2 default credentials chain S3A falls back to after Hadoop's own
# keys (variables, system properties, web identity, the profile, the container and instance roles).
HADOOP_ENDPOINT = "fs.s3a.endpoint"
HADOOP_REGION = "fs.s3a.endpoint.region"
HADOOP_PATH_STYLE = "fs.s3a.path.style.access"
HADOOP_ACCESS_KEY = "fs.s3a.access.key"
HADOOP_SECRET_KEY = "fs.s3a.secret.key"
HADOOP_SESSION_TOKEN = "fs.s3a.session.token"
HADOOP_PROVIDERS = "fs.s3a.aws.credentials.provider"
DEFAULT_PROVIDERS = ",".join(
    (
        "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
        "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider",
    )
)


class ObjectStoreError(ValueError):
    """Raised for a location or an object-store setting that cannot be used (the message names which)."""


def is_s3(location: str) -> bool:
    """True for an ``s3://``, ``s3a://`` or ``s3n://`` location."""
    return bool(_S3_URI.match(location))


def canonical_location(location: str) -> str:
    """``s3://bucket/prefix`` for any S3 spelling (``s3a://``, ``s3n://``); other locations unchanged.

    ``ObjectStoreError`` for an S3 location without a bucket.
    """
    if not is_s3(location):
        return location
    rest = _S3_URI.sub("", location)
    bucket = rest.split("/", 1)[0]
    if not bucket:
        raise ObjectStoreError(f"table location {location!r} names no bucket (expected s3://bucket/prefix)")
    return f"{CANONICAL_SCHEME}://{rest}"


def spark_path(path: str) -> str:
    """The path Spark (Hadoop) reads and writes: ``s3a://`` for any S3 spelling; other paths unchanged."""
    return _S3_URI.sub(f"{SPARK_SCHEME}://", path) if is_s3(path) else path


def object_key(path: str) -> str:
    """``bucket/key`` of an S3 URI (pyarrow's path inside an ``S3FileSystem``)."""
    return _S3_URI.sub("", path)


def _flag(text: str | None) -> bool | None:
    if text is None or not text.strip():
        return None
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on", "path"):
        return True
    if value in ("false", "0", "no", "off", "virtual", "auto"):
        return False
    raise ObjectStoreError(f"expected true or false, got {text!r}")


@dataclass(frozen=True)
class S3Options:
    """Where and how to reach S3: endpoint (``http(s)://host:port``), region, path style, and Hadoop's keys.

    Keys are held only when they came from Hadoop's settings (the AWS SDK finds
    the others itself); they never appear in ``repr`` or ``describe``.
    """

    endpoint: str | None = None
    region: str | None = None
    path_style: bool | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    sources: tuple[tuple[str, str], ...] = ()  # (option, where it came from), for ``describe``

    @classmethod
    def resolve(cls, environ: Mapping[str, str] | None = None, hadoop: Mapping[str, str] | None = None) -> S3Options:
        """The options from Hadoop's ``fs.s3a.*`` (when given), else the AWS variables, else the AWS profile."""
        env = os.environ if environ is None else environ
        conf = dict(hadoop or {})
        profile = _profile(env)
        found: dict[str, tuple[Any, str]] = {}

        def first(option: str, *candidates: tuple[str | None, str]) -> None:
            for value, where in candidates:
                if value is not None and str(value).strip():
                    found[option] = (str(value).strip(), where)
                    return

        first(
            "endpoint",
            (conf.get(HADOOP_ENDPOINT), HADOOP_ENDPOINT),
            (env.get("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"),
            (env.get("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"),
            (profile.get("s3.endpoint_url"), "profile s3.endpoint_url"),
            (profile.get("endpoint_url"), "profile endpoint_url"),
        )
        first(
            "region",
            (conf.get(HADOOP_REGION), HADOOP_REGION),
            (env.get("AWS_REGION"), "AWS_REGION"),
            (env.get("AWS_DEFAULT_REGION"), "AWS_DEFAULT_REGION"),
            (profile.get("region"), "profile region"),
        )
        first(
            "path_style",
            (conf.get(HADOOP_PATH_STYLE), HADOOP_PATH_STYLE),
            (profile.get("s3.addressing_style"), "profile s3.addressing_style"),
        )
        endpoint = found.get("endpoint", (None, ""))[0]
        if endpoint is not None and not re.match(r"^https?://[^/\s]+/?$", endpoint):
            if re.match(r"^[^/\s:]+(:\d+)?$", endpoint):  # Hadoop's fs.s3a.endpoint may be a bare host[:port]
                endpoint = f"https://{endpoint}"
            else:
                where = found["endpoint"][1]
                raise ObjectStoreError(f"S3 endpoint {where}={endpoint!r}: expected http(s)://host[:port]")
        try:
            path_style = _flag(found["path_style"][0]) if "path_style" in found else None
        except ObjectStoreError as exc:
            raise ObjectStoreError(f"S3 path style {found['path_style'][1]}: {exc}") from None
        return cls(
            endpoint=endpoint.rstrip("/") if endpoint else None,
            region=found.get("region", (None, ""))[0],
            path_style=path_style,
            access_key=conf.get(HADOOP_ACCESS_KEY) or None,
            secret_key=conf.get(HADOOP_SECRET_KEY) or None,
            session_token=conf.get(HADOOP_SESSION_TOKEN) or None,
            sources=tuple((option, where) for option, (_value, where) in sorted(found.items())),
        )

    @property
    def uses_path_style(self) -> bool:
        """Path-style addressing: as configured, else whenever an endpoint is given."""
        return self.path_style if self.path_style is not None else self.endpoint is not None

    def arrow_options(self) -> dict[str, Any]:
        """Keyword arguments of ``pyarrow.fs.S3FileSystem`` (keys only when Hadoop gave them)."""
        options: dict[str, Any] = {"region": self.region or "us-east-1"}
        if self.endpoint:
            scheme, _, host = self.endpoint.partition("://")
            options["endpoint_override"] = host
            options["scheme"] = scheme
        options["force_virtual_addressing"] = not self.uses_path_style
        if self.access_key and self.secret_key:
            options["access_key"] = self.access_key
            options["secret_key"] = self.secret_key
            if self.session_token:
                options["session_token"] = self.session_token
        return options

    def hadoop_settings(self, existing: Mapping[str, str] | None = None) -> dict[str, str]:
        """The ``fs.s3a.*`` settings S3A needs to reach the same store (never a secret); ``existing`` ones win."""
        have = dict(existing or {})
        wanted: dict[str, str] = {HADOOP_PATH_STYLE: str(self.uses_path_style).lower()}
        if self.endpoint:
            wanted[HADOOP_ENDPOINT] = self.endpoint
        if self.region:
            wanted[HADOOP_REGION] = self.region
        if HADOOP_ACCESS_KEY not in have and HADOOP_PROVIDERS not in have:
            wanted[HADOOP_PROVIDERS] = DEFAULT_PROVIDERS
        return {k: v for k, v in wanted.items() if k not in have}

    def describe(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """What ``ordo config`` shows: endpoint, region, path style and where credentials come from, secrets hidden."""
        env = os.environ if environ is None else environ
        where = dict(self.sources)
        if self.access_key:
            credentials = HADOOP_ACCESS_KEY
        elif env.get("AWS_ACCESS_KEY_ID"):
            credentials = "AWS_ACCESS_KEY_ID"
        else:
            credentials = f"AWS SDK default chain (profile {env.get('AWS_PROFILE') or 'default'}, instance role)"
        return {
            "S3_ENDPOINT": f"{self.endpoint} ({where['endpoint']})" if self.endpoint else "AWS (default)",
            "S3_REGION": f"{self.region} ({where['region']})" if self.region else "us-east-1 (default)",
            "S3_PATH_STYLE": str(self.uses_path_style).lower(),
            "S3_CREDENTIALS": f"{HIDDEN} from {credentials}",
        }


def _profile(env: Mapping[str, str]) -> dict[str, str]:
    """The AWS profile's settings from the config file (``s3 =`` sub-settings as ``s3.<name>``); {} if none."""
    path = Path(env.get("AWS_CONFIG_FILE") or Path.home() / ".aws" / "config").expanduser()
    name = env.get("AWS_PROFILE") or "default"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
    except (OSError, configparser.Error) as exc:
        raise ObjectStoreError(f"cannot read the AWS config file {path}: {exc}") from None
    section = name if name == "default" else f"profile {name}"
    if not parser.has_section(section):
        return {}
    values: dict[str, str] = {}
    for key, value in parser.items(section):
        if key == "s3":
            for line in value.splitlines():
                sub, sep, text = line.partition("=")
                if sep:
                    values[f"s3.{sub.strip()}"] = text.strip()
        else:
            values[key] = value.strip()
    return values


_CACHE: dict[S3Options, Any] = {}
_CACHE_LOCK = threading.Lock()
_DEFAULT: list[S3Options] = []  # this process's options, set by ``use_options`` (a driver's Spark session)


def use_options(options: S3Options | None) -> None:
    """Make ``options`` this process's S3 options (None: resolve from the environment again)."""
    with _CACHE_LOCK:
        _DEFAULT.clear()
        if options is not None:
            _DEFAULT.append(options)


def current_options() -> S3Options:
    """This process's S3 options: those ``use_options`` set, else resolved from the environment and profile."""
    with _CACHE_LOCK:
        if _DEFAULT:
            return _DEFAULT[0]
    return S3Options.resolve()


def s3_filesystem(options: S3Options | None = None) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` for ``options`` (default: ``current_options()``), one per distinct options."""
    from pyarrow import fs

    wanted = options or current_options()
    with _CACHE_LOCK:
        cached = _CACHE.get(wanted)
        if cached is None:
            cached = _CACHE[wanted] = fs.S3FileSystem(**wanted.arrow_options())
        return cached


def filesystem(path: str) -> tuple[Any, str]:
    """``(pyarrow FileSystem, path within it)`` for a local path, a ``file:`` URI, any S3 spelling or a URI pyarrow
    knows (``gs://``, ``hdfs://``, ...)."""
    from pyarrow import fs

    if path.startswith("file:"):
        return fs.LocalFileSystem(), re.sub(r"^file:(//)?", "", path)
    if is_s3(path):
        return s3_filesystem(), object_key(path)
    if _URI.match(path):
        return fs.FileSystem.from_uri(path)
    return fs.LocalFileSystem(), path


def is_object_store(filesys: Any) -> bool:
    """True for a filesystem without directories (S3, GCS): no directory to make, and a rename is a copy."""
    return getattr(filesys, "type_name", "") in ("s3", "gcs")


__all__ = [
    "CANONICAL_SCHEME",
    "ObjectStoreError",
    "S3Options",
    "canonical_location",
    "current_options",
    "filesystem",
    "is_object_store",
    "is_s3",
    "object_key",
    "s3_filesystem",
    "spark_path",
    "use_options",
]
