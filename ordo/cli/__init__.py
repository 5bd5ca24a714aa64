"""The ``ordo`` command line: thin registration; each command delegates to the module that owns it.

Errors users can act on (no broker, no catalog, unknown table, bad version or
timestamp, ...) are ``ordo.errors.OrdoError``s: ``OrdoGroup`` prints them as
one line, ``error: <sentence>``, and exits with status 1, never a traceback
(set ``ORDO_DEBUG=1`` to see one).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from ordo.kernel.errors import OrdoError
from ordo.kernel.settings import Settings, load_settings

EXIT_ERROR = 1


class OrdoGroup(click.Group):
    """A click group that turns ``OrdoError``s into ``error: <message>`` and exit status 1.

    Run as the ``ordo`` program (``main()`` without arguments: ``python -m ordo``, the console script), it is
    ``PROGRAM``: with ``--log-format json`` (or ``ORDO_LOG_FORMAT=json``) every line it writes is JSON from the
    start, its usage errors included (``ordo.cli.logs``).
    """

    def main(self, args: Any = None, *rest: Any, **extra: Any) -> Any:
        if args is None:
            PROGRAM["on"] = True
            if _json_wanted(sys.argv[1:]):
                _log_json_now()
        return super().main(args, *rest, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OrdoError as exc:
            if os.environ.get("ORDO_DEBUG"):
                raise
            message = " ".join(str(exc).split("\n", 1)[0].split()) or type(exc).__name__
            _report_error(message)
            ctx.exit(EXIT_ERROR)


PROGRAM = {"on": False}  # this process is the ``ordo`` program, not a host calling the CLI (a test's CliRunner)


def _json_wanted(argv: list[str]) -> bool:
    """``--log-format json`` anywhere on the command line, else ``ORDO_LOG_FORMAT=json``."""
    for index, arg in enumerate(argv):
        if arg == "--log-format" and index + 1 < len(argv):
            return argv[index + 1].lower() == "json"
        if arg.startswith("--log-format="):
            return arg.split("=", 1)[1].lower() == "json"
    return os.environ.get("ORDO_LOG_FORMAT", "").strip().lower() == "json"


def _log_json_now() -> None:
    """JSON logs before the settings are read, so that a usage error or a bad setting is JSON too."""
    from ordo.cli.logs import COMMAND_LEVEL, configure_logging

    configure_logging(COMMAND_LEVEL, "json", program=PROGRAM["on"])


def _report_error(message: str) -> None:
    """``error: <message>`` on stderr: a line of text, or in ``json`` one record of the ``ordo`` logger."""
    from ordo.cli.logs import current_format

    if current_format() == "json":
        import logging

        logging.getLogger("ordo").error("error: %s", message)
    else:
        click.echo(f"error: {message}", err=True)


pass_settings = click.make_pass_decorator(Settings)

# The long-running commands log at info by default; the others at warning (their output is the answer).
SERVICES = {"up", "broker", "arbiter", "consumer", "compactor", "cdc", "demo"}
LOG_LEVELS = click.Choice(["debug", "info", "warning", "error", "critical"], case_sensitive=False)
LOG_FORMATS = click.Choice(["text", "json"], case_sensitive=False)


def _apply_logging(ctx: click.Context) -> None:
    """(Re)configure logging from the settings in the root context and the command being run."""
    from ordo.cli.logs import COMMAND_LEVEL, SERVICE_LEVEL, configure_logging

    root = ctx.find_root()
    settings = root.obj
    if not isinstance(settings, Settings):
        return
    command = ctx.info_name if ctx.parent is not None else root.invoked_subcommand
    if command not in SERVICES and settings.log_level is None and settings.log_format == "text":
        return  # a one-shot command left alone: Python's own last resort prints warnings to stderr, as before
    default = SERVICE_LEVEL if command in SERVICES else COMMAND_LEVEL
    configure_logging(settings.log_level or default, settings.log_format, program=PROGRAM["on"])


def _set_logging(name: str) -> Any:
    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is None:
            return
        root = ctx.find_root()
        if isinstance(root.obj, Settings):
            root.obj = root.obj.with_overrides(**{name: value.lower()})
            ctx.obj = root.obj  # the command's own context copied the old settings when it was made
        _apply_logging(ctx)

    return callback


def logging_options(command: click.Command) -> None:
    """Add ``--log-level`` and ``--log-format`` to ``command`` (every subcommand has them, as the group does)."""
    command.params.append(
        click.Option(
            ["--log-level"],
            type=LOG_LEVELS,
            expose_value=False,
            callback=_set_logging("log_level"),
            help="debug, info, warning, error or critical (default: ORDO_LOG_LEVEL; info for services)",
        )
    )
    command.params.append(
        click.Option(
            ["--log-format"],
            type=LOG_FORMATS,
            expose_value=False,
            callback=_set_logging("log_format"),
            help="text, or json: one JSON object per line (default: ORDO_LOG_FORMAT or text)",
        )
    )


@click.group(cls=OrdoGroup)
@click.option("--bootstrap-servers", envvar="ORDO_BOOTSTRAP_SERVERS", default=None, help="Kafka bootstrap servers")
@click.option("--topic-prefix", envvar="ORDO_TOPIC_PREFIX", default=None, help="topic prefix (default: ordo)")
@click.option(
    "--catalog", envvar="ORDO_CATALOG", default=None, help="the consumer's catalog: SQLite file or http:// URL"
)
@click.option(
    "--log-level", type=LOG_LEVELS, default=None, help="log level (default: ORDO_LOG_LEVEL; info for services)"
)
@click.option("--log-format", type=LOG_FORMATS, default=None, help="text or json (default: ORDO_LOG_FORMAT or text)")
@click.version_option(package_name="ordo")
@click.pass_context
def main(
    ctx: click.Context,
    bootstrap_servers: str | None,
    topic_prefix: str | None,
    catalog: str | None,
    log_level: str | None,
    log_format: str | None,
) -> None:
    """ordo: a transaction manager for Delta tables whose commit log lives on Kafka.

    \b
    Run the stack:      ordo up | ordo broker | ordo arbiter | ordo consumer | ordo compactor | ordo cdc
    Try it:             ordo demo
    Read the catalog:   ordo tables | history | show | changes | tail
    Operate:            ordo vacuum | ordo replay | ordo repair | ordo keygen

    Settings come from ORDO_* environment variables (ORDO_BOOTSTRAP_SERVERS,
    ORDO_TOPIC_PREFIX, ORDO_WAREHOUSE, ORDO_CATALOG, ORDO_KAFKA__*), which the
    options above override; `ordo config` prints them (secrets hidden).
    """
    try:
        ctx.obj = load_settings(
            bootstrap_servers=bootstrap_servers,
            topic_prefix=topic_prefix,
            catalog=catalog,
            log_level=log_level.lower() if log_level else None,
            log_format=log_format.lower() if log_format else None,
        )
    except (OSError, ValueError) as exc:
        if not isinstance(exc, OrdoError):
            raise click.UsageError(f"bad settings: {exc}") from exc
        if (log_format or os.environ.get("ORDO_LOG_FORMAT", "")).strip().lower() == "json":  # the error, as asked
            _log_json_now()
        raise
    _apply_logging(ctx)


# --------------------------------------------------------------------------- running the stack


def _shard_option(value: str | None) -> str | None:
    """``--shard I/N`` checked as the flag (``ORDO_CONSUMER_SHARD`` is checked with the settings, by its name)."""
    from ordo.kernel.validation import parse_shard

    if value is not None:
        try:
            parse_shard(value)
        except ValueError as exc:
            raise click.BadParameter(f"{exc} (accepted: I/N with 0 <= I < N, e.g. 0/1)") from exc
    return value


def _broker_timeout_option(func: Any) -> Any:
    return click.option(
        "--broker-timeout",
        type=float,
        default=60.0,
        show_default=True,
        help="seconds to wait for the Kafka broker at start-up before giving up",
    )(func)


def _metrics_options(port: int | None, port_note: str = "", host: str | None = "127.0.0.1", host_help: str = "") -> Any:
    """A service's ``--metrics-port``, ``--metrics-host`` and ``--no-metrics`` (/metrics, /healthz, /readyz)."""

    def apply(func: Any) -> Any:
        func = click.option("--no-metrics", is_flag=True, help="serve no /metrics, /healthz, /readyz")(func)
        func = click.option(
            "--metrics-host",
            default=host,
            show_default=host is not None,
            help=host_help or "address of the metrics server",
        )(func)
        return click.option(
            "--metrics-port",
            type=click.IntRange(min=0, max=65535),
            default=port,
            show_default=port is not None,
            help=f"serve /metrics, /healthz and /readyz on this port, 0 = any free{port_note}",
        )(func)

    return apply


@main.command()
@click.option("--port", type=int, default=None, help="TCP port on 127.0.0.1 (default: a free one)")
@pass_settings
def broker(settings: Settings, port: int | None) -> None:
    """Run the embedded Tansu broker in the foreground (in memory only: data is lost when it stops)."""
    from ordo.broker.tansu import run_foreground
    from ordo.cli.logs import service_echo

    def text(line: str) -> None:
        click.echo(line, err=line.startswith("WARNING"))

    echo = service_echo("json", "ordo.broker") if settings.log_format == "json" else text
    raise SystemExit(run_foreground(port=port, echo=echo))


@main.command()
@click.option("--shard", default="0/1", show_default=True, help="I/N: decide the tables with crc32(name) % N == I")
@click.option(
    "--fleet",
    is_flag=True,
    help="share every table with the other arbiters of the Kafka consumer group ORDO_ARBITER_GROUP "
    "(default <prefix>.arbiters) instead of a static --shard; implied when ORDO_ARBITER_GROUP is set",
)
@click.option(
    "--commit-timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="seconds to finish a Kafka transaction before exiting as fenced/unreachable",
)
@click.option("--state-dir", default=None, help="checkpoints here (default: ORDO_STATE_DIR or ~/.local/state/ordo)")
@click.option(
    "--checkpoint-every",
    type=click.IntRange(min=0),
    default=10_000,
    show_default=True,
    help="checkpoint a table every N decisions (0: never)",
)
@click.option(
    "--checkpoint-interval",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="at most one checkpoint per this many seconds",
)
@_metrics_options(
    None,
    " (default: ORDO_ARBITER_METRICS_PORT or 8767)",
    host=None,
    host_help="address of /metrics (default: ORDO_ARBITER_METRICS_HOST or 127.0.0.1)",
)
@_broker_timeout_option
@pass_settings
def arbiter(
    settings: Settings,
    shard: str,
    fleet: bool,
    commit_timeout: float,
    state_dir: str | None,
    checkpoint_every: int,
    checkpoint_interval: float,
    metrics_port: int | None,
    metrics_host: str | None,
    no_metrics: bool,
    broker_timeout: float,
) -> None:
    """Run an arbiter: decide every table's intents (of one shard) until Ctrl-C / SIGTERM."""
    from dataclasses import replace

    from ordo.arbiter.service import default_group, parse_shard, run_arbiter
    from ordo.services.up import check_broker

    try:
        index_count = parse_shard(shard)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--shard") from exc
    group = default_group(settings) if fleet or settings.arbiter_group else None
    if group is not None and index_count != (0, 1):
        raise click.UsageError("--shard and the arbiter fleet (--fleet / ORDO_ARBITER_GROUP) exclude each other")
    check_broker(settings, broker_timeout)
    settings = settings.with_overrides(
        state_dir=state_dir, arbiter_metrics_port=metrics_port, arbiter_metrics_host=metrics_host
    )
    if no_metrics:
        settings = replace(settings, arbiter_metrics_port=None)
    raise SystemExit(
        run_arbiter(
            settings,
            index_count,
            commit_timeout,
            checkpoint_every=checkpoint_every,
            checkpoint_interval=checkpoint_interval,
            group=group,
        )
    )


@main.command()
@click.option(
    "--catalog",
    default=None,
    help="SQLite catalog file or postgresql:// URL (default: ORDO_CATALOG or ordo-catalog.db)",
)
@click.option("--http-host", default=None, help="HTTP service address (default: ORDO_HTTP_HOST or 127.0.0.1)")
@click.option("--http-port", type=int, default=None, help="HTTP service port, 0 = any free (default: 8765)")
@click.option("--no-http", is_flag=True, help="materialize only; serve no HTTP")
@click.option(
    "--shard",
    default=None,
    callback=lambda ctx, param, value: _shard_option(value),
    help="I/N: follow only the tables with crc32(name) % N == I (several consumers, one PostgreSQL catalog; "
    "default: ORDO_CONSUMER_SHARD or 0/1)",
)
@click.option(
    "--group",
    "group",
    is_flag=False,
    flag_value="",
    default=None,
    help="share the tables with the other consumers of this Kafka consumer group (one PostgreSQL catalog); "
    "bare --group: ORDO_CONSUMER_GROUP or <prefix>.consumers. Excludes --shard",
)
@_broker_timeout_option
@pass_settings
def consumer(
    settings: Settings,
    catalog: str | None,
    http_host: str | None,
    http_port: int | None,
    no_http: bool,
    shard: str | None,
    group: str | None,
    broker_timeout: float,
) -> None:
    """Run the consumer: materialize the catalog from the decisions topics and serve reads over HTTP."""
    from ordo.cli.logs import service_echo
    from ordo.consumer.service import run_consumer
    from ordo.kernel.validation import parse_shard
    from ordo.services.up import check_broker

    settings = settings.with_overrides(catalog=catalog, http_host=http_host, http_port=http_port, consumer_shard=shard)
    if settings.catalog.startswith(("http://", "https://")):
        raise click.UsageError(
            f"the consumer writes a SQLite or PostgreSQL catalog; ORDO_CATALOG/--catalog is the HTTP service "
            f"({settings.catalog}): pass --catalog PATH or --catalog postgresql://..."
        )
    if group is not None:
        settings = settings.with_overrides(
            consumer_group=group or settings.consumer_group or f"{settings.topic_prefix}.consumers"
        )
    if settings.consumer_group:
        if parse_shard(settings.consumer_shard) != (0, 1):
            raise click.UsageError("--shard and the consumer group (--group / ORDO_CONSUMER_GROUP) exclude each other")
        from ordo.consumer.stores import is_postgres

        if not is_postgres(settings.catalog):
            raise click.UsageError(
                "a consumer group shares one catalog among its members: --catalog postgresql://... "
                f"(got {settings.catalog})"
            )
    check_broker(settings, broker_timeout)
    raise SystemExit(run_consumer(settings, http=not no_http, echo=service_echo(settings.log_format, "ordo.consumer")))


@main.command()
@click.option("--master", default=None, help="Spark master (default: ORDO_COMPACTOR_MASTER or local[2])")
@click.option("--tables", "table_names", default=None, help="comma-separated tables to follow (default: all)")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=None,
    help="seconds between a table's rewrites (default: ORDO_COMPACTOR_INTERVAL or 5)",
)
@click.option(
    "--parallel-tables",
    type=click.IntRange(min=1),
    default=None,
    help="tables rewritten at once (default: ORDO_COMPACTOR_PARALLEL_TABLES or 2)",
)
@click.option(
    "--fleet",
    is_flag=True,
    help="share the tables with the other compactors of the Kafka consumer group ORDO_COMPACTOR_GROUP "
    "(default <prefix>.compactors); implied when ORDO_COMPACTOR_GROUP is set",
)
@_metrics_options(None, " (default: ORDO_COMPACTOR_METRICS_PORT or 8766)")
@pass_settings
def compactor(
    settings: Settings,
    master: str | None,
    table_names: str | None,
    interval: float | None,
    parallel_tables: int | None,
    fleet: bool,
    metrics_port: int | None,
    metrics_host: str,
    no_metrics: bool,
) -> None:
    """Run the table service: compact and cluster tables while writers commit (Ctrl-C / SIGTERM stops it).

    Per (partition, bucket): MINOR COMPACT where small files pile up in a hot
    partition, MAJOR COMPACT (or CLUSTER with ordo.cluster_by) in a cold one,
    CLUSTER beside INSERT-only writes; one Spark job per table and operation,
    one commit per partition. Table properties: ordo.compaction.enabled,
    ordo.compaction.min_files, ordo.compaction.cold_seconds, ordo.cluster_by
    (docs/operations.md).
    """
    from ordo.services.compactor import run_compactor
    from ordo.services.compactor_fleet import default_group

    settings = settings.with_overrides(
        compactor_master=master,
        compactor_interval=interval,
        compactor_metrics_port=metrics_port,
        compactor_parallel_tables=parallel_tables,
    )
    raise SystemExit(
        run_compactor(
            settings,
            master=settings.compactor_master,
            tables=[t.strip() for t in (table_names or "").split(",") if t.strip()],
            interval=settings.compactor_interval,
            parallel_tables=settings.compactor_parallel_tables,
            group=default_group(settings) if fleet or settings.compactor_group else None,
            metrics_port=None if no_metrics else settings.compactor_metrics_port,
            metrics_host=metrics_host,
        )
    )


@main.command()
@click.option("--catalog", "catalog", default=None, help="the catalog to follow (default: ORDO_CATALOG)")
@click.option("--tables", "table_names", default=None, help="comma-separated tables to publish (default: all)")
@click.option(
    "--topic",
    "template",
    default=None,
    help="the change topic's name, from {prefix} and {table} (default: ORDO_CHANGES_TOPIC or {prefix}.{table}.changes)",
)
@click.option(
    "--max-records",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="row changes per Kafka transaction at most (a larger commit spans several)",
)
@click.option(
    "--format",
    "record_format",
    type=click.Choice(["json", "connect-json"], case_sensitive=False),
    default=None,
    help="json: Debezium's envelope alone (Flink, Spark); connect-json: with Kafka Connect's schema/payload "
    "wrapper, for JsonConverter with schemas.enable=true (default: ORDO_CHANGES_FORMAT, else json)",
)
@click.option(
    "--tombstones/--no-tombstones",
    default=None,
    help="a tombstone (null value, same key) after each delete, for JDBC sinks and compacted topics "
    "(default: ORDO_CHANGES_TOMBSTONES, else on, as Debezium's tombstones.on.delete)",
)
@_metrics_options(8768)
@_broker_timeout_option
@pass_settings
def cdc(
    settings: Settings,
    catalog: str | None,
    table_names: str | None,
    template: str | None,
    max_records: int,
    record_format: str | None,
    tombstones: bool | None,
    metrics_port: int,
    metrics_host: str,
    no_metrics: bool,
    broker_timeout: float,
) -> None:
    """Publish each table's row changes to <prefix>.<table>.changes (Debezium JSON, exactly once).

    Follows the catalog a consumer materializes (SQLite file, postgresql:// or
    the consumer's http:// URL); every table, new ones included, unless
    --tables. Resumes after a crash from the topic itself (docs/change-topic.md).
    """
    from ordo.cli.logs import service_echo
    from ordo.consumer.changetopic import run_change_publisher
    from ordo.kernel.validation import topic_template_problem
    from ordo.services.up import check_broker

    if template is not None and (problem := topic_template_problem(template)) is not None:
        raise click.BadParameter(f"{template!r}: {problem}", param_hint="--topic")
    settings = settings.with_overrides(
        catalog=catalog,
        changes_topic=template,
        changes_format=None if record_format is None else record_format.lower(),
        changes_tombstones=tombstones,
    )
    check_broker(settings, broker_timeout)
    tables = [t.strip() for t in (table_names or "").split(",") if t.strip()]
    raise SystemExit(
        run_change_publisher(
            settings,
            template=settings.changes_topic,
            tables=tables,
            max_records=max_records,
            echo=service_echo(settings.log_format, "ordo.cdc"),
            metrics_port=None if no_metrics else metrics_port,
            metrics_host=metrics_host,
        )
    )


@main.command()
@click.option(
    "--dir",
    "--data",
    "directory",
    default=None,
    help="catalog, warehouse, keys, logs and the Kafka data here (default: ~/.local/share/ordo/up-kafka; "
    "a temporary dir with --broker tansu)",
)
@click.option(
    "--broker",
    "broker",
    type=click.Choice(["kafka", "tansu"]),
    default=None,
    help="the local broker to start (default: kafka): a 1-node Apache Kafka (KRaft; durable; needs Java, and Maven once to fetch "
    "it) or Tansu (in memory, no Java; differs from Kafka: docs/tansu.md)",
)
@click.option(
    "--kafka", "kafka_servers", default=None, help="use this Kafka (bootstrap servers) instead of starting one"
)
@click.option("--broker-port", type=int, default=None, help="Tansu's port on 127.0.0.1 (default: a free one)")
@click.option(
    "--http-port", type=int, default=None, help="consumer HTTP port, 0 = any free (default: ORDO_HTTP_PORT or 8765)"
)
@click.option("--http-host", default=None, help="consumer HTTP address (default: ORDO_HTTP_HOST or 127.0.0.1)")
@click.option("--no-compactor", is_flag=True, help="do not start the table service (ordo compactor; it needs Java)")
@pass_settings
def up(
    settings: Settings,
    directory: str | None,
    kafka_servers: str | None,
    broker_port: int | None,
    http_port: int | None,
    http_host: str | None,
    no_compactor: bool,
    broker: str | None,
) -> None:
    """Run the embedded stack in the foreground: broker, arbiter, consumer, compactor (Ctrl-C stops it).

    The broker is a 1-node Apache Kafka (KRaft) whose data stays in --data
    (tables survive a restart with the same --data); --broker tansu runs the
    in-memory Tansu instead (every table's log is lost when it stops); --kafka
    uses an existing Kafka. Prints the ORDO_* settings clients need;
    ORDO_BOOTSTRAP_SERVERS/ORDO_CATALOG/ORDO_WAREHOUSE of this shell are not
    used (they may point at an earlier run). With --log-format json every line
    it and its children write is one JSON object.
    """
    from ordo.cli.logs import service_echo
    from ordo.services.up import run_up

    raise SystemExit(
        run_up(
            directory=directory,
            topic_prefix=settings.topic_prefix,
            kafka_servers=kafka_servers,
            kafka=dict(settings.kafka),
            broker_port=broker_port,
            http_port=settings.http_port if http_port is None else http_port,
            http_host=http_host or settings.http_host,
            echo=service_echo(settings.log_format, "ordo.up"),
            compactor=not no_compactor,
            broker=broker,
            log_format=settings.log_format,
            log_level=settings.log_level,
        )
    )


@main.command()
@click.option(
    "--broker",
    type=click.Choice(["kafka", "tansu"]),
    default="kafka",
    show_default=True,
    help="the demo's broker: a 1-node Apache Kafka (fetched by Maven once) or the in-memory Tansu",
)
def demo(broker: str) -> None:
    """Concurrent Spark writers checked against the conflict matrix, then the table service beside a stream (~3 min)."""
    from ordo.cli.demo import run_demo

    raise SystemExit(run_demo(broker=broker))


# --------------------------------------------------------------------------- reading the catalog

json_option = click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")


@main.command()
@json_option
@click.option(
    "--check",
    is_flag=True,
    help="instead: check every table's topics on the broker for what can lose history (retention, compaction, "
    "replicas); exit 1 on a finding",
)
@pass_settings
def tables(settings: Settings, as_json: bool, check: bool) -> None:
    """List the tables in the catalog with their head version (--check: their topics' durability)."""
    from ordo.cli.commands import check_tables_command, tables_command

    if check:
        raise SystemExit(check_tables_command(settings, as_json))
    tables_command(settings, as_json)


@main.command()
@click.argument("table")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="only the newest N decisions")
@json_option
@pass_settings
def history(settings: Settings, table: str, limit: int | None, as_json: bool) -> None:
    """Every decision of TABLE's log, newest first: version, time version, operation, outcome, reason, rebase."""
    from ordo.cli.commands import history_command

    history_command(settings, table, limit, as_json)


@main.command()
@click.argument("table")
@click.option("--version", "version", default=None, metavar="V", help="ID version (time travel)")
@click.option("--timestamp", default=None, metavar="T", help="as of this time: ISO 8601 or epoch ms (time travel)")
@click.option("--no-rows", is_flag=True, help="skip counting rows (reads the key columns of every live file)")
@json_option
@pass_settings
def show(
    settings: Settings, table: str, version: str | None, timestamp: str | None, no_rows: bool, as_json: bool
) -> None:
    """TABLE's schema, live files and rows at the head, a version, or a time."""
    from ordo.cli.commands import show_command

    show_command(settings, table, version, timestamp, not no_rows, as_json)


@main.command()
@click.argument("table")
@click.option("--from", "start", required=True, metavar="X", help="first ID version, or time (with --by time)")
@click.option("--to", "end", default=None, metavar="Y", help="last ID version or time, inclusive (default: head)")
@click.option("--by", type=click.Choice(["id", "time"]), default="id", show_default=True, help="range of versions")
@click.option("--rows", is_flag=True, help="also print the change rows (read from the data files)")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, help="change rows to print")
@click.option("--include-rewrites", is_flag=True, help="also list compaction and clustering commits")
@json_option
@pass_settings
def changes(
    settings: Settings,
    table: str,
    start: str,
    end: str | None,
    by: str,
    rows: bool,
    limit: int,
    include_rewrites: bool,
    as_json: bool,
) -> None:
    """The change feed of TABLE between two ID versions or time versions (both inclusive)."""
    from ordo.cli.commands import changes_command

    changes_command(settings, table, start, end, by, rows, limit, include_rewrites, as_json)


@main.command()
@click.argument("table")
@click.option("--from", "start", default=None, metavar="V", help="first ID version to print (default: the next one)")
@click.option("--include-rewrites", is_flag=True, help="also print compaction and clustering commits")
@click.option("--idle-timeout", type=float, default=None, help="stop after this many seconds without a commit")
@json_option
@pass_settings
def tail(
    settings: Settings, table: str, start: str | None, include_rewrites: bool, idle_timeout: float | None, as_json: bool
) -> None:
    """Follow TABLE's change feed: print each commit as the consumer materializes it (Ctrl-C ends)."""
    from ordo.cli.commands import tail_command

    tail_command(settings, table, start, include_rewrites, idle_timeout, as_json)


@main.command()
@click.argument("table")
@click.option("--retain", type=click.FloatRange(min=0), required=True, metavar="HOURS", help="retention window")
@click.option("--apply", is_flag=True, help="delete the files (default: dry run, only list them)")
@click.option(
    "--orphans",
    is_flag=True,
    help="also delete files no commit ever added and no undecided intent names (reads the intents log)",
)
@click.option(
    "--orphan-age",
    type=float,
    default=None,
    metavar="HOURS",
    help="orphans modified less than this long ago are kept (default 24; below 1 only with --force)",
)
@click.option(
    "--force",
    is_flag=True,
    help="allow an --orphan-age below the safe floor of 1 hour, a --retain below the table's ordo.retention_hours",
)
@json_option
@pass_settings
def vacuum(
    settings: Settings,
    table: str,
    retain: float,
    apply: bool,
    orphans: bool,
    orphan_age: float | None,
    force: bool,
    as_json: bool,
) -> None:
    """Delete TABLE's data files that no version inside the retention window references (dry run by default)."""
    from ordo.cli.commands import vacuum_command

    vacuum_command(settings, table, retain, apply, orphans, as_json, orphan_age, force)


@main.command()
@click.argument("table")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, help="seconds to wait")
@json_option
@pass_settings
def repair(settings: Settings, table: str, timeout: float, as_json: bool) -> None:
    """Re-materialize TABLE in the catalog from its decisions log (after the consumer stopped it).

    Needs the catalog file (ORDO_CATALOG). When a consumer runs on it, that
    consumer does the repair while serving every other table; otherwise this
    process does. Exit 1 when the table stops again (the bad record is still
    in the log).
    """
    from ordo.cli.commands import repair_command

    raise SystemExit(repair_command(settings, table, timeout, as_json))


@main.command()
@click.argument("table")
@click.option("--verify", is_flag=True, help="audit mode: also check the decisions log on its own, list every problem")
@click.option(
    "--allow-unsigned",
    is_flag=True,
    help="upgrade only: accept decisions no trusted key signed (a log written by a release without signing)",
)
@click.option("--timeout", type=float, default=60.0, show_default=True, help="seconds to read each log to its end")
@json_option
@pass_settings
def replay(settings: Settings, table: str, verify: bool, allow_unsigned: bool, timeout: float, as_json: bool) -> None:
    """Re-derive TABLE's decisions from its intents; report the first divergence (exit 1) or OK (exit 0).

    With --verify, every decision must be vouched for by a signature of a key in ORDO_TRUSTED_KEYS.
    """
    from ordo.services.audit import run_replay

    if allow_unsigned:
        settings = settings.with_overrides(require_signatures=False)
    raise SystemExit(run_replay(settings, table, verify=verify, as_json=as_json, timeout=timeout, echo=click.echo))


@main.command()
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="overwrite an existing key")
@click.option("--keep", is_flag=True, help="keep an existing key pair and exit 0 (for a one-shot container)")
@click.option(
    "--public",
    "public_copy",
    type=click.Path(dir_okay=False),
    default=None,
    help="also write the public key here: a place readers mount without seeing the private key",
)
def keygen(path: str, force: bool, keep: bool, public_copy: str | None) -> None:
    """Write a new arbiter signing key to PATH (mode 0600) and its public key to PATH.pub.

    The arbiter signs with PATH (ORDO_ARBITER_KEY); every reader trusts PATH.pub (ORDO_TRUSTED_KEYS).
    """
    from pathlib import Path

    from ordo.schemas.signing import Signer, write_keypair

    if keep and not force and os.path.exists(path) and os.path.exists(f"{path}.pub"):
        signer = Signer.from_file(path)
        click.echo(f"kept the existing key {path} (key id {signer.key_id.hex()})")
    else:
        signer = write_keypair(path, overwrite=force)
        click.echo(f"private key {path} (keep it secret), public key {path}.pub, key id {signer.key_id.hex()}")
    if public_copy is not None:
        Path(public_copy).parent.mkdir(parents=True, exist_ok=True)
        Path(public_copy).write_bytes(signer.public_pem())
        click.echo(f"public key also at {public_copy}")


@main.command("config")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of VARIABLE=value lines")
@pass_settings
def config_command(settings: Settings, as_json: bool) -> None:
    """Print the effective settings as ORDO_* variables, secrets hidden (Kafka passwords, catalog URL passwords),
    then the object store's (S3_*: endpoint, region, path style, where credentials come from; never a key)."""
    import json

    from ordo.kernel.objectstore import ObjectStoreError, S3Options
    from ordo.kernel.settings import effective_settings

    values = effective_settings(settings)
    try:
        values.update(S3Options.resolve().describe())
    except ObjectStoreError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(values, indent=2))
        return
    for key, value in values.items():
        click.echo(f"{key}={value}")


for _command in main.commands.values():
    logging_options(_command)


if __name__ == "__main__":
    main()
