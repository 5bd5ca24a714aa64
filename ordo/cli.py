"""The ``ordo`` command line. Each command delegates to the module that owns it."""

from __future__ import annotations

import click

from ordo.settings import load_settings


@click.group()
@click.option("--bootstrap-servers", envvar="ORDO_BOOTSTRAP_SERVERS", default=None, help="Kafka bootstrap servers")
@click.option("--topic-prefix", envvar="ORDO_TOPIC_PREFIX", default=None, help="topic prefix (default: ordo)")
@click.pass_context
def main(ctx: click.Context, bootstrap_servers: str | None, topic_prefix: str | None) -> None:
    """ordo: a transaction manager for Delta tables whose commit log lives on Kafka."""
    ctx.obj = load_settings(bootstrap_servers=bootstrap_servers, topic_prefix=topic_prefix)


@main.command()
@click.option("--port", type=int, default=None, help="TCP port on 127.0.0.1 (default: a free one)")
def broker(port: int | None) -> None:
    """Run the embedded Tansu broker in the foreground (in memory only: data is lost when it stops)."""
    from ordo.broker import run_foreground

    raise SystemExit(run_foreground(port=port, echo=lambda line: click.echo(line, err=line.startswith("WARNING"))))


@main.command()
@click.option("--shard", default="0/1", show_default=True, help="I/N: decide the tables with crc32(name) % N == I")
@click.option(
    "--commit-timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="seconds to finish a Kafka transaction before exiting as fenced/unreachable",
)
@click.pass_obj
def arbiter(settings: object, shard: str, commit_timeout: float) -> None:
    """Run an arbiter: decide every table's intents (of one shard) until Ctrl-C / SIGTERM."""
    import logging

    from arbiter.service import parse_shard, run_arbiter

    try:
        index_count = parse_shard(shard)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--shard") from exc
    if not getattr(settings, "bootstrap_servers", None):
        raise click.UsageError("no Kafka broker: set ORDO_BOOTSTRAP_SERVERS or pass --bootstrap-servers")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    raise SystemExit(run_arbiter(settings, index_count, commit_timeout))  # type: ignore[arg-type]


@main.command()
@click.option("--catalog", default=None, help="SQLite catalog file (default: ORDO_CATALOG or ordo-catalog.db)")
@click.option("--http-host", default=None, help="HTTP service address (default: ORDO_HTTP_HOST or 127.0.0.1)")
@click.option("--http-port", type=int, default=None, help="HTTP service port, 0 = any free (default: 8765)")
@click.option("--no-http", is_flag=True, help="materialize only; serve no HTTP")
@click.pass_obj
def consumer(
    settings: object, catalog: str | None, http_host: str | None, http_port: int | None, no_http: bool
) -> None:
    """Run the consumer: materialize the catalog from the decisions topics and serve reads over HTTP."""
    import logging

    from consumer.service import run_consumer

    if not getattr(settings, "bootstrap_servers", None):
        raise click.UsageError("no Kafka broker: set ORDO_BOOTSTRAP_SERVERS or pass --bootstrap-servers")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = settings.with_overrides(catalog=catalog, http_host=http_host, http_port=http_port)  # type: ignore[attr-defined]
    raise SystemExit(run_consumer(settings, http=not no_http))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
