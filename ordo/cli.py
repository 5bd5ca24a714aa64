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


if __name__ == "__main__":
    main()
