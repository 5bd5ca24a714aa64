"""Where the catalog lives: a SQLite file (the embedded default) or a PostgreSQL database.

``open_store(location)`` picks the store from ``ORDO_CATALOG``: a URL starting
with ``postgresql://`` or ``postgres://`` is a PostgreSQL database (psycopg 3);
a path or ``sqlite:///path`` is a SQLite file. Both speak one SQL dialect to
``consumer.store``: statements are written with ``?`` placeholders and
``ON CONFLICT`` upserts, and the PostgreSQL connection rewrites ``?`` to
``%s``. What differs (column types, how the schema version is kept, how a
write transaction starts, which errors mean a broken constraint or a schema
not created yet) lives in the two ``CatalogStore`` classes here.

Both stores hand out plain DB-API row tuples; ``consumer.store`` turns them
into named rows (one ``typing.NamedTuple`` per query, whose fields are the
query's column list) in its query functions, so one reader serves both and no
reader indexes a row by position. ``scalar`` reads one-value queries.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


class Cursor(Protocol):
    """The part of a DB-API cursor the catalog uses."""

    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """An autocommit connection taking ``?`` placeholders (``sqlite3.Connection`` or ``PostgresConnection``)."""

    kind: str

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any: ...

    def close(self) -> None: ...


class CatalogStore(Protocol):
    """One catalog database: how to connect, start transactions, create the schema and recognize errors."""

    kind: str
    location: str
    shared: bool  # several machines may write it at once (PostgreSQL), or one host's processes only (SQLite)
    integrity_errors: tuple[type[BaseException], ...]
    lock_rows: str  # suffix of a SELECT that locks the rows it reads until the transaction ends

    def describe(self) -> str:
        """The location for messages (without a password)."""

    def exists(self) -> bool:
        """True when the database can be opened by a reader (a SQLite file exists; PostgreSQL: always)."""

    def connect(self, *, readonly: bool = False) -> Connection:
        """An autocommit connection; a reader's never writes."""

    def begin_write(self, conn: Connection) -> None:
        """Start a write transaction (SQLite takes the file's write lock at once)."""

    def begin_read(self, conn: Connection) -> None:
        """Start a read transaction: every query in it sees one consistent state."""

    def schema_statements(self, schema: str) -> list[str]:
        """The CREATE statements of ``schema`` (written for SQLite) in this store's types."""

    def schema_version(self, conn: Connection) -> int:
        """The catalog's schema version (0 when new)."""

    def set_schema_version(self, conn: Connection, version: int) -> None:
        """Record the schema version (inside the schema transaction)."""

    def lock_schema(self, conn: Connection) -> None:
        """Serialize schema creation between processes starting at once (inside the transaction)."""

    def optimize(self, conn: Connection) -> None:
        """Refresh the query planner's statistics."""

    def is_missing_schema(self, exc: BaseException) -> bool:
        """True when ``exc`` says the catalog's tables do not exist yet."""


def scalar(conn: Connection, sql: str, parameters: Sequence[Any] = ()) -> Any:
    """The one value a one-column query returns in its first row, or None when it returns no row."""
    row = conn.execute(sql, parameters).fetchone()
    if row is None:
        return None
    (value,) = row
    return value


# ---------------------------------------------------------------------- SQLite


class SqliteConnection(sqlite3.Connection):
    """A ``sqlite3.Connection`` that says which store it belongs to."""

    kind = "sqlite"


class SqliteStore:
    """A catalog in one SQLite file (WAL mode): one host, any number of reader processes, writers one at a time."""

    kind = "sqlite"
    shared = False
    integrity_errors: tuple[type[BaseException], ...] = (sqlite3.IntegrityError,)
    lock_rows = ""  # BEGIN IMMEDIATE already holds the file's write lock

    def __init__(self, path: str | Path) -> None:
        self.location = str(path)

    def describe(self) -> str:
        return self.location

    def exists(self) -> bool:
        return Path(self.location).exists()

    def connect(self, *, readonly: bool = False) -> Connection:
        if readonly:
            uri = Path(self.location).absolute().as_uri() + "?mode=rw"
            conn = sqlite3.connect(
                uri,
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=30.0,
                factory=SqliteConnection,
            )
            conn.execute("PRAGMA query_only = ON")
        else:
            Path(self.location).absolute().parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.location, isolation_level=None, check_same_thread=False, timeout=30.0, factory=SqliteConnection
            )
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL in WAL mode loses nothing on a process crash (kill -9); only an OS crash
            # or power loss may drop the last transactions, which are then re-read from Kafka.
            conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA cache_size = -65536")
        return conn  # type: ignore[return-value]

    def begin_write(self, conn: Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def begin_read(self, conn: Connection) -> None:
        conn.execute("BEGIN")

    def schema_statements(self, schema: str) -> list[str]:
        return [s for s in schema.split(";") if s.strip()]

    def schema_version(self, conn: Connection) -> int:
        return int(scalar(conn, "PRAGMA user_version"))

    def set_schema_version(self, conn: Connection, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {int(version)}")

    def lock_schema(self, conn: Connection) -> None:
        pass  # BEGIN IMMEDIATE

    def optimize(self, conn: Connection) -> None:
        conn.execute("PRAGMA optimize")

    def is_missing_schema(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc)


# ---------------------------------------------------------------------- PostgreSQL


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (the catalog's SQL has no ``?`` or ``%`` in literals)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresConnection:
    """A psycopg 3 connection (autocommit) that takes the catalog's ``?`` placeholders."""

    kind = "postgresql"

    def __init__(self, conn: Any) -> None:
        self.raw = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        if not parameters:
            return self.raw.execute(sql)  # no placeholders: psycopg sends the text as it is
        return self.raw.execute(_pg_sql(sql), parameters)

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any:
        cursor = self.raw.cursor()
        cursor.executemany(_pg_sql(sql), list(parameters))  # rowcount: the sum over every row (psycopg >= 3.1)
        return cursor

    def close(self) -> None:
        self.raw.close()


_SCHEMA_LOCK = zlib.crc32(b"ordo.catalog.schema")  # advisory lock key serializing schema creation


def _pg_schema(statement: str) -> str:
    statement = re.sub(r"\bINTEGER PRIMARY KEY\b", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", statement)
    statement = re.sub(r"\bINTEGER\b", "BIGINT", statement)  # milliseconds and offsets exceed 32 bits
    statement = re.sub(r"\bBLOB\b", "BYTEA", statement)
    return statement.replace(") WITHOUT ROWID", ")")


class PostgresStore:
    """A catalog in a PostgreSQL database: any number of consumers and readers on any machine."""

    kind = "postgresql"
    shared = True
    lock_rows = " FOR UPDATE"

    def __init__(self, url: str) -> None:
        import psycopg

        self.location = url
        self.integrity_errors: tuple[type[BaseException], ...] = (psycopg.errors.IntegrityError,)
        self._psycopg = psycopg

    def describe(self) -> str:
        parts = urlsplit(self.location)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
            return urlunsplit(parts._replace(netloc=netloc))
        return self.location

    def exists(self) -> bool:
        return True

    def connect(self, *, readonly: bool = False) -> Connection:
        from ordo.consumer.errors import CatalogUnavailableError

        url = self.location
        if url.startswith("postgres://"):
            url = "postgresql://" + url[len("postgres://") :]
        try:
            raw = self._psycopg.connect(url, autocommit=True, connect_timeout=10)
        except self._psycopg.OperationalError as exc:
            raise CatalogUnavailableError(f"cannot connect to the catalog database {self.describe()}: {exc}") from exc
        if readonly:
            raw.execute("SET default_transaction_read_only = on")
        return PostgresConnection(raw)

    def begin_write(self, conn: Connection) -> None:
        conn.execute("BEGIN")

    def begin_read(self, conn: Connection) -> None:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def schema_statements(self, schema: str) -> list[str]:
        return [_pg_schema(s) for s in schema.split(";") if s.strip()]

    def schema_version(self, conn: Connection) -> int:
        if scalar(conn, "SELECT to_regclass('catalog_info')") is None:
            return 0
        value = scalar(conn, "SELECT value FROM catalog_info WHERE key = 'schema_version'")
        return 0 if value is None else int(value)

    def set_schema_version(self, conn: Connection, version: int) -> None:
        conn.execute(
            "INSERT INTO catalog_info (key, value) VALUES ('schema_version', ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(version),),
        )

    def lock_schema(self, conn: Connection) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))

    def optimize(self, conn: Connection) -> None:
        conn.execute("ANALYZE tables, commits, files")

    def is_missing_schema(self, exc: BaseException) -> bool:
        return isinstance(exc, self._psycopg.errors.UndefinedTable)


def is_postgres(location: str) -> bool:
    """True when ``location`` names a PostgreSQL database."""
    return location.startswith(POSTGRES_PREFIXES)


def open_store(location: str | Path) -> CatalogStore:
    """The store ``location`` names: ``postgresql://...`` / ``postgres://...``, or a SQLite path / ``sqlite:///path``."""
    text = str(location)
    if is_postgres(text):
        return PostgresStore(text)
    if text.startswith(("http://", "https://")):
        raise ValueError(f"{text} is the consumer's HTTP service, not a catalog database")
    if text.startswith(SQLITE_PREFIX):  # sqlite:///relative.db, sqlite:////absolute.db
        text = text[len(SQLITE_PREFIX) :]
    return SqliteStore(text)


__all__ = [
    "CatalogStore",
    "Connection",
    "PostgresConnection",
    "PostgresStore",
    "SqliteConnection",
    "SqliteStore",
    "is_postgres",
    "open_store",
    "scalar",
]
