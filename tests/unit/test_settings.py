"""Settings are one typed model whose errors name the variable and the value; ``ordo config`` hides secrets; logs.

No broker: ``load_settings`` with explicit environments, the CLI through click's runner, the log formatters
through the root logger.
"""

from __future__ import annotations

import json
import logging
from dataclasses import fields

import pytest
from click.testing import CliRunner

from ordo.cli import main
from ordo.cli.logs import configure_logging
from ordo.kernel.settings import ENV_VARS, Settings, SettingsError, effective_settings, hide_url_password, load_settings

# A value each typed variable cannot take, and the words the error must carry besides the variable and value.
BAD = {
    "ORDO_HTTP_PORT": ("eighty", "expected an integer"),
    "ORDO_ARBITER_METRICS_PORT": ("70000", "less than or equal to 65535"),
    "ORDO_COMPACTOR_METRICS_PORT": ("-1", "greater than or equal to 0"),
    "ORDO_REQUIRE_SIGNATURES": ("maybe", "expected true or false"),
    "ORDO_RESUBMIT_AFTER": ("soon", "expected a number"),
    "ORDO_BROKER_KIND": ("redpanda", "'auto', 'kafka' or 'tansu'"),
    "ORDO_FETCH_WAIT_BUSY_MS": ("0", "greater than or equal to 1"),
    "ORDO_FETCH_WAIT_IDLE_MS": ("1.5", "expected an integer"),
    "ORDO_CLIENT_FETCH_WAIT_MS": ("x", "expected an integer"),
    "ORDO_CONSUMER_FETCH_WAIT_MS": ("-5", "greater than or equal to 1"),
    "ORDO_COMPACTOR_INTERVAL": ("0", "greater than or equal to 0.1"),
    "ORDO_COMPACTOR_PARALLEL_TABLES": ("0", "greater than or equal to 1"),
    "ORDO_LOG_LEVEL": ("loud", "'debug', 'info', 'warning', 'error' or 'critical'"),
    "ORDO_LOG_FORMAT": ("xml", "'text' or 'json'"),
    "ORDO_TOPIC_PREFIX": ("bad prefix!", "ORDO_TOPIC_PREFIX"),
    "ORDO_TOPIC_REPLICATION_FACTOR": ("-1", "greater than or equal to 0"),
    "ORDO_TOPIC_MIN_INSYNC_REPLICAS": ("two", "expected an integer"),
    "ORDO_ALLOW_LOSSY_LOGS": ("sometimes", "expected true or false"),
}


@pytest.mark.parametrize("variable", sorted(BAD))
def test_a_bad_value_names_the_variable_and_the_value(variable: str) -> None:
    value, words = BAD[variable]
    with pytest.raises(SettingsError) as caught:
        load_settings({variable: value})
    message = str(caught.value)
    assert f"{variable}={value!r}" in message and words in message
    assert isinstance(caught.value, ValueError)  # callers that caught ValueError still do


def test_every_field_has_one_variable_and_every_typed_variable_is_checked() -> None:
    names = [name for name, _key, _cast in ENV_VARS]
    assert len(names) == len(set(names)) and set(names) <= {f.name for f in fields(Settings)}
    typed = {key for name, key, cast in ENV_VARS if cast is not str}
    assert typed <= set(BAD), f"add a bad value for {sorted(typed - set(BAD))}"


def test_an_argument_is_named_as_the_argument() -> None:
    with pytest.raises(SettingsError, match=r"http_port=-1: Input should be greater than or equal to 0"):
        load_settings({}, http_port=-1)
    with pytest.raises(SettingsError, match=r"http_port='x'"):
        Settings().with_overrides(http_port="x")


def test_values_parse_and_off_turns_a_metrics_server_off() -> None:
    loaded = load_settings(
        {
            "ORDO_HTTP_PORT": "9000",
            "ORDO_ARBITER_METRICS_PORT": "off",
            "ORDO_COMPACTOR_METRICS_PORT": "0",
            "ORDO_REQUIRE_SIGNATURES": "no",
            "ORDO_LOG_LEVEL": "DEBUG",
            "ORDO_CLIENT_ID": "nightly-etl",
        }
    )
    assert (loaded.http_port, loaded.arbiter_metrics_port, loaded.compactor_metrics_port) == (9000, None, 0)
    assert loaded.require_signatures is False and loaded.log_level == "debug"
    assert loaded.client_name("producer") == "nightly-etl.producer"
    defaults = load_settings({})
    assert (defaults.http_port, defaults.compactor_metrics_port, defaults.arbiter_metrics_port) == (8765, 8766, 8767)
    assert defaults.client_name("producer") == "ordo.commit-client.producer"


def test_secrets_are_hidden() -> None:
    assert hide_url_password("postgresql://ordo:s3cret@db:5432/ordo") == "postgresql://ordo:***@db:5432/ordo"
    assert hide_url_password("postgresql://db/ordo") == "postgresql://db/ordo"
    assert hide_url_password("warehouse") == "warehouse"
    shown = effective_settings(
        load_settings(
            {
                "ORDO_CATALOG": "postgresql://ordo:s3cret@db:5432/ordo",
                "ORDO_KAFKA__SASL_PASSWORD": "s3cret",
                "ORDO_KAFKA__SSL_KEY_PASSWORD": "s3cret",
                "ORDO_KAFKA__SASL_OAUTHBEARER_CLIENT_SECRET": "s3cret",
                "ORDO_KAFKA__SASL_USERNAME": "ordo",
            }
        )
    )
    assert "s3cret" not in json.dumps(shown)
    assert shown["ORDO_KAFKA__SASL_PASSWORD"] == "***" and shown["ORDO_KAFKA__SASL_USERNAME"] == "ordo"
    assert shown["ORDO_CATALOG"] == "postgresql://ordo:***@db:5432/ordo"


def test_ordo_config_prints_the_effective_settings() -> None:
    env = {"ORDO_HTTP_PORT": "9100", "ORDO_KAFKA__SASL_PASSWORD": "s3cret", "ORDO_CATALOG": "postgresql://u:pw@h/d"}
    result = CliRunner().invoke(main, ["config"], env=env)
    assert result.exit_code == 0, result.output
    lines = dict(line.split("=", 1) for line in result.output.splitlines())
    assert lines["ORDO_HTTP_PORT"] == "9100" and lines["ORDO_KAFKA__SASL_PASSWORD"] == "***"
    assert lines["ORDO_CATALOG"] == "postgresql://u:***@h/d" and "s3cret" not in result.output
    as_json = CliRunner().invoke(main, ["config", "--json"], env=env)
    assert json.loads(as_json.output)["ORDO_HTTP_PORT"] == "9100"
    bad = CliRunner().invoke(main, ["config"], env={"ORDO_HTTP_PORT": "eighty"})
    assert bad.exit_code != 0 and "ORDO_HTTP_PORT='eighty'" in bad.output


def test_every_command_takes_log_level_and_log_format() -> None:
    for name, command in main.commands.items():
        options = {opt for param in command.params for opt in getattr(param, "opts", ())}
        assert {"--log-level", "--log-format"} <= options, name
    result = CliRunner().invoke(main, ["config", "--log-level", "debug", "--log-format", "json"])
    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == logging.DEBUG
    result = CliRunner().invoke(main, ["--log-level", "error", "config"])
    assert result.exit_code == 0 and logging.getLogger().level == logging.ERROR
    assert CliRunner().invoke(main, ["config", "--log-format", "xml"]).exit_code == 2


def test_json_logs_are_one_object_per_line_with_the_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("debug", "json")
    try:
        logging.getLogger("ordo.test").warning(
            "table %s: decision at offset %d refused", "t", 7, extra={"table": "t", "offset": 7}
        )
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("ordo.test").exception("failed", extra={"table": "u"})
        lines = capsys.readouterr().err.strip().splitlines()
        first, second = (json.loads(line) for line in lines)
        assert first["level"] == "warning" and first["logger"] == "ordo.test"
        assert (first["message"], first["table"], first["offset"]) == ("table t: decision at offset 7 refused", "t", 7)
        assert second["table"] == "u" and "RuntimeError: boom" in second["exception"]
        configure_logging("warning", "text")
        logging.getLogger("ordo.test").info("hidden")
        logging.getLogger("ordo.test").warning("shown", extra={"table": "t", "offset": 3})
        text = capsys.readouterr().err
        assert "hidden" not in text and 'WARNING ordo.test shown table="t" offset=3' in text
    finally:
        configure_logging("warning", "text")
