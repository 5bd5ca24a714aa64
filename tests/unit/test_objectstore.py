"""One table location spelling for Spark's S3A and pyarrow's S3FileSystem (ordo/kernel/objectstore.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ordo.cli import main
from ordo.kernel.objectstore import (
    DEFAULT_PROVIDERS,
    ObjectStoreError,
    S3Options,
    canonical_location,
    filesystem,
    object_key,
    spark_path,
)
from ordo.producer.connection import absolute_location

SECRET = "s3cret-value-never-shown"


@pytest.mark.parametrize("given", ["s3://lake/events", "s3a://lake/events", "s3n://lake/events", "S3A://lake/events"])
def test_every_s3_spelling_is_one_location(given: str) -> None:
    assert canonical_location(given) == "s3://lake/events"
    assert absolute_location(given) == "s3://lake/events"
    assert spark_path(given) == "s3a://lake/events"
    assert object_key(given) == "lake/events"


def test_other_locations_are_left_as_they_are(tmp_path: Path) -> None:
    assert canonical_location("gs://lake/t") == "gs://lake/t" and spark_path("gs://lake/t") == "gs://lake/t"
    assert spark_path("/data/t/x.parquet") == "/data/t/x.parquet"
    assert absolute_location("relative/t") == str(Path("relative/t").absolute())
    fs, inner = filesystem(f"file://{tmp_path}")
    assert fs.type_name == "local" and inner == str(tmp_path)


def test_an_s3_location_needs_a_bucket() -> None:
    with pytest.raises(ObjectStoreError, match="names no bucket"):
        canonical_location("s3a:///events")


def test_pyarrow_reaches_s3a_locations_through_s3filesystem() -> None:
    """``FileSystem.from_uri("s3a://...")`` fails (Unrecognized filesystem type); ordo's mapping does not."""
    from pyarrow import ArrowInvalid
    from pyarrow.fs import FileSystem

    with pytest.raises(ArrowInvalid, match="Unrecognized filesystem type"):
        FileSystem.from_uri("s3a://lake/events")
    fs, inner = filesystem("s3a://lake/events/dt=1/x-0.parquet")
    assert fs.type_name == "s3" and inner == "lake/events/dt=1/x-0.parquet"


def test_options_come_from_the_aws_variables() -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1", "AWS_CONFIG_FILE": "/nonexistent"}
    options = S3Options.resolve(env)
    assert (options.endpoint, options.region, options.uses_path_style) == ("http://127.0.0.1:9000", "eu-west-1", True)
    arrow = options.arrow_options()
    assert arrow["endpoint_override"] == "127.0.0.1:9000" and arrow["scheme"] == "http"
    assert arrow["force_virtual_addressing"] is False and "access_key" not in arrow  # the SDK's chain finds keys
    # the S3-specific endpoint variable wins over the general one; AWS_REGION over AWS_DEFAULT_REGION
    env |= {"AWS_ENDPOINT_URL_S3": "https://s3.example.test", "AWS_DEFAULT_REGION": "us-west-2"}
    assert S3Options.resolve(env).endpoint == "https://s3.example.test"
    assert S3Options.resolve(env).region == "eu-west-1"
    # no endpoint: AWS itself, virtual-hosted addressing
    plain = S3Options.resolve({"AWS_CONFIG_FILE": "/nonexistent"})
    assert plain.endpoint is None and not plain.uses_path_style
    assert plain.arrow_options()["force_virtual_addressing"] is True


def test_options_come_from_the_aws_profile(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "[default]\nregion = us-east-2\n\n"
        "[profile lake]\nregion = ap-south-1\nendpoint_url = http://127.0.0.1:9100\n"
        "s3 =\n  addressing_style = virtual\n"
    )
    assert S3Options.resolve({"AWS_CONFIG_FILE": str(config)}).region == "us-east-2"
    lake = S3Options.resolve({"AWS_CONFIG_FILE": str(config), "AWS_PROFILE": "lake"})
    assert (lake.endpoint, lake.region, lake.uses_path_style) == ("http://127.0.0.1:9100", "ap-south-1", False)
    # a variable beats the profile
    env = {"AWS_CONFIG_FILE": str(config), "AWS_PROFILE": "lake", "AWS_REGION": "eu-north-1"}
    assert S3Options.resolve(env).region == "eu-north-1"


def test_hadoop_settings_win_and_map_both_ways() -> None:
    hadoop = {
        "fs.s3a.endpoint": "http://127.0.0.1:9200",
        "fs.s3a.endpoint.region": "eu-central-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.access.key": "AKIA-hadoop",
        "fs.s3a.secret.key": SECRET,
    }
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1", "AWS_CONFIG_FILE": "/nonexistent"}
    options = S3Options.resolve(env, hadoop)
    assert (options.endpoint, options.region, options.uses_path_style) == (
        "http://127.0.0.1:9200",
        "eu-central-1",
        True,
    )
    assert options.arrow_options()["secret_key"] == SECRET  # the keys Hadoop holds reach pyarrow
    assert SECRET not in repr(options) and SECRET not in json.dumps(options.describe(env))
    # the AWS variables become S3A's settings; S3A's keys are never copied into them
    from_env = S3Options.resolve(env).hadoop_settings()
    assert from_env == {
        "fs.s3a.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.endpoint.region": "eu-west-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.aws.credentials.provider": DEFAULT_PROVIDERS,
    }
    # a setting the session already has is left alone
    assert "fs.s3a.endpoint" not in S3Options.resolve(env).hadoop_settings({"fs.s3a.endpoint": "http://other:1"})
    assert "fs.s3a.aws.credentials.provider" not in options.hadoop_settings(hadoop)


@pytest.mark.parametrize(
    ("env", "hadoop", "named"),
    [
        ({"AWS_ENDPOINT_URL": "127.0.0.1:9000/bucket"}, {}, "AWS_ENDPOINT_URL"),
        ({}, {"fs.s3a.path.style.access": "maybe"}, "fs.s3a.path.style.access"),
    ],
)
def test_a_bad_setting_is_refused_by_name(env: dict[str, str], hadoop: dict[str, str], named: str) -> None:
    with pytest.raises(ObjectStoreError, match=named):
        S3Options.resolve({"AWS_CONFIG_FILE": "/nonexistent", **env}, hadoop)


def test_a_bare_hadoop_endpoint_is_https() -> None:
    options = S3Options.resolve({"AWS_CONFIG_FILE": "/nonexistent"}, {"fs.s3a.endpoint": "s3.eu-west-1.amazonaws.com"})
    assert options.endpoint == "https://s3.eu-west-1.amazonaws.com"


def test_ordo_config_shows_the_object_store_without_secrets() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIA-visible-id",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": SECRET,
        "AWS_CONFIG_FILE": "/nonexistent",
    }
    result = CliRunner().invoke(main, ["config"], env=env)
    assert result.exit_code == 0, result.output
    lines = dict(line.split("=", 1) for line in result.output.splitlines())
    assert lines["S3_ENDPOINT"] == "http://127.0.0.1:9000 (AWS_ENDPOINT_URL)"
    assert lines["S3_REGION"] == "eu-west-1 (AWS_REGION)" and lines["S3_PATH_STYLE"] == "true"
    assert lines["S3_CREDENTIALS"] == "*** from AWS_ACCESS_KEY_ID"
    assert SECRET not in result.output and "AKIA-visible-id" not in result.output
