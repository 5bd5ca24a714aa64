"""Settings are one typed model whose errors name the variable, the value and the accepted form; ``ordo config``
checks and prints every one, hides secrets; logs.

No broker: ``load_settings`` with explicit environments, the CLI through click's runner and as the ``ordo``
program (``python -m ordo``: a bad value ends in one line naming the variable, never a traceback), the log
formatters through the root logger. The pass-through Kafka settings are checked by librdkafka's own
configuration check, the topic configs against Apache Kafka's.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from ordo.cli import main
from ordo.cli.logs import configure_logging
from ordo.kernel.settings import (
    ENV_VARS,
    FORMS,
    Settings,
    SettingsError,
    effective_settings,
    hide_url_password,
    load_settings,
)

# A value each typed variable cannot take, and the words the error must carry besides the variable and value.
BAD = {
    "ORDO_HTTP_PORT": ("eighty", "expected an integer"),
    "ORDO_ARBITER_METRICS_PORT": ("70000", "less than or equal to 65535"),
    "ORDO_COMPACTOR_METRICS_PORT": ("-1", "greater than or equal to 0"),
    "ORDO_REQUIRE_SIGNATURES": ("maybe", "expected true or false"),
    "ORDO_DECISIONS_TRANSACTIONS": ("perhaps", "expected true or false"),
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
    "ORDO_CONSUMER_SHARD": ("first/2", "shard must look like I/N"),
    "ORDO_CHANGES_TOPIC": ("{prefix}.{tabel}.changes", "unknown placeholder {tabel}"),
    "ORDO_BOOTSTRAP_SERVERS": ("kafka-1:ninety", "not host:port: 'kafka-1:ninety'"),
    "ORDO_CATALOG": ("mysql://db/ordo", "unknown scheme 'mysql'"),
    "ORDO_HTTP_HOST": ("http://0.0.0.0", "not a host name or an IP address"),
    "ORDO_ARBITER_METRICS_HOST": ("local host", "not a host name or an IP address"),
    "ORDO_COMPACTOR_MASTER": ("locale[2]", "not a Spark master URL"),
    "ORDO_CHANGES_FORMAT": ("avro", "'json' or 'connect-json'"),
    "ORDO_CHANGES_TOMBSTONES": ("deleted", "expected true or false"),
}
FIELD = {key: name for name, key, _cast in ENV_VARS}


@pytest.mark.parametrize("variable", sorted(BAD))
def test_a_bad_value_names_the_variable_and_the_value(variable: str) -> None:
    value, words = BAD[variable]
    with pytest.raises(SettingsError) as caught:
        load_settings({variable: value})
    message = str(caught.value)
    assert f"{variable}={value!r}" in message and words in message
    assert f"(accepted: {FORMS[FIELD[variable]]})" in message, message
    assert isinstance(caught.value, ValueError)  # callers that caught ValueError still do


def test_every_field_has_one_variable_and_every_checked_variable_has_a_bad_value() -> None:
    names = [name for name, _key, _cast in ENV_VARS]
    assert len(names) == len(set(names)) and set(names) <= {f.name for f in fields(Settings)}
    typed = {key for name, key, cast in ENV_VARS if cast is not str}
    assert typed <= set(BAD), f"add a bad value for {sorted(typed - set(BAD))}"
    checked = {key for name, key, _cast in ENV_VARS if name in FORMS}
    assert checked == set(BAD), f"a form without a bad value, or the reverse: {sorted(checked ^ set(BAD))}"


# A pass-through value each check refuses, with librdkafka's (or our) words and the accepted form it names.
BAD_PASSTHROUGH = {
    "ORDO_KAFKA__SOCKET_TIMEOUT_MS": (
        "ten-seconds",
        'Invalid value for configuration property "socket.timeout.ms"',
        "an integer in 10..300000",
    ),
    "ORDO_KAFKA__SESSION_TIMEOUT_MS": ("0", "outside allowed range", "an integer in 1..3600000"),
    "ORDO_KAFKA__ENABLE_IDEMPOTENCE": ("maybe", 'Expected bool value for "enable.idempotence"', "true or false"),
    "ORDO_KAFKA__SECURITY_PROTOCOL": ("tls", 'Invalid value "tls"', "CONFIGURATION.md"),
    "ORDO_KAFKA__LOG_LEVEL": ("7", 'No such configuration property: "log.level"', "ORDO_KAFKA_CONFIG file"),
    "ORDO_TOPIC__RETENTION_MS": ("forever", "not a value of retention.ms", "an integer >= -1"),
    "ORDO_TOPIC__CLEANUP_POLICY": ("compacted", "not a value of cleanup.policy", "delete, compact"),
    "ORDO_TOPIC__RETENTION_DAYS": ("7", "'retention.days' is not a topic config", "ORDO_TOPIC__RETENTION_MS"),
}


@pytest.mark.parametrize("variable", sorted(BAD_PASSTHROUGH))
def test_a_bad_pass_through_value_names_the_variable_and_the_form(variable: str) -> None:
    value, words, form = BAD_PASSTHROUGH[variable]
    with pytest.raises(SettingsError) as caught:
        load_settings({variable: value})
    message = str(caught.value)
    assert f"{variable}={value!r}" in message and words in message and form in message, message


def test_good_pass_through_values_pass_and_every_bad_one_is_named_at_once(tmp_path: Path) -> None:
    good = {
        "ORDO_KAFKA__SOCKET_TIMEOUT_MS": "10000",
        "ORDO_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "ORDO_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "ORDO_KAFKA__ACKS": "all",
        "ORDO_TOPIC__RETENTION_MS": "-1",
        "ORDO_TOPIC__CLEANUP_POLICY": "delete",
        "ORDO_TOPIC__MESSAGE_TIMESTAMP_TYPE": "LogAppendTime",
    }
    loaded = load_settings(good)
    assert loaded.kafka["socket.timeout.ms"] == "10000" and loaded.topic_config["retention.ms"] == "-1"
    properties = tmp_path / "kafka.properties"
    properties.write_text("# a comment\nsocket.timeout.ms=soon\nlog_level=7\n")
    with pytest.raises(SettingsError) as caught:
        load_settings({"ORDO_KAFKA_CONFIG": str(properties), "ORDO_TOPIC__SEGMENT_MS": "0"})
    message = str(caught.value)
    assert f"socket.timeout.ms in ORDO_KAFKA_CONFIG ({properties})='soon'" in message
    assert "ORDO_TOPIC__SEGMENT_MS='0': not a value of segment.ms (accepted: an integer >= 1)" in message
    assert "log_level" not in message  # a property whose name holds _ is set through the file
    properties.write_text("socket.timeout.ms\n")
    with pytest.raises(SettingsError, match=r"ORDO_KAFKA_CONFIG='.*': line 1 is 'socket.timeout.ms', not key=value"):
        load_settings({"ORDO_KAFKA_CONFIG": str(properties)})


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
    assert json.loads(as_json.stdout)["ORDO_HTTP_PORT"] == "9100"
    bad = CliRunner().invoke(main, ["config"], env={"ORDO_HTTP_PORT": "eighty"})
    assert bad.exit_code != 0 and "ORDO_HTTP_PORT='eighty'" in bad.output


def test_ordo_config_shows_the_topic_configs_and_the_change_topic_and_checks_them() -> None:
    env = {"ORDO_TOPIC__RETENTION_MS": "-1", "ORDO_CHANGES_TOPIC": "cdc.{prefix}.{table}"}
    shown = CliRunner().invoke(main, ["config"], env=env)
    assert shown.exit_code == 0, shown.output
    lines = dict(line.split("=", 1) for line in shown.output.splitlines())
    assert lines["ORDO_TOPIC__RETENTION_MS"] == "-1" and lines["ORDO_CHANGES_TOPIC"] == "cdc.{prefix}.{table}"
    for variable, (value, words, _form) in BAD_PASSTHROUGH.items():
        bad = CliRunner().invoke(main, ["config"], env={variable: value})
        assert bad.exit_code == 1 and f"error: invalid setting {variable}={value!r}" in bad.output, bad.output
        assert words in bad.output
    for variable in ("ORDO_CONSUMER_SHARD", "ORDO_CHANGES_TOPIC"):
        value, words = BAD[variable]
        bad = CliRunner().invoke(main, ["config"], env={variable: value})
        assert bad.exit_code == 1 and f"{variable}={value!r}: {words}" in bad.output, bad.output


def program(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m ordo <args>`` with only these ``ORDO_*`` variables (the real program: no test runner around it)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ORDO_")}
    return subprocess.run(
        [sys.executable, "-m", "ordo", *args], capture_output=True, text=True, env={**clean, **env}, timeout=60
    )


@pytest.mark.parametrize(
    ("command", "variable", "value", "flag"),
    [
        (["consumer"], "ORDO_KAFKA__SOCKET_TIMEOUT_MS", "ten-seconds", None),
        (["arbiter"], "ORDO_KAFKA__SOCKET_TIMEOUT_MS", "ten-seconds", None),
        (["consumer"], "ORDO_CONSUMER_SHARD", "first/2", "--shard"),
        (["cdc"], "ORDO_CHANGES_TOPIC", "{prefix}.{tabel}.changes", "--topic"),
        (["compactor"], "ORDO_TOPIC__RETENTION_MS", "forever", None),
    ],
)
def test_a_service_names_the_variable_never_a_flag_and_prints_no_traceback(
    command: list[str], variable: str, value: str, flag: str | None
) -> None:
    done = program(*command, ORDO_BOOTSTRAP_SERVERS="127.0.0.1:1", **{variable: value})
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: invalid setting {variable}={value!r}: "), done.stderr
    assert "(accepted: " in lines[0] and "Traceback" not in done.stderr
    if flag is not None:
        assert flag not in lines[0]  # a flag that was never passed is not named


def test_a_bad_flag_is_named_as_the_flag() -> None:
    shard = CliRunner().invoke(main, ["consumer", "--shard", "first/2"])
    assert shard.exit_code == 2 and "Invalid value for '--shard'" in shard.output, shard.output
    topic = CliRunner().invoke(main, ["cdc", "--topic", "{prefix}.changes"])
    assert topic.exit_code == 2 and "Invalid value for --topic" in topic.output and "{table}" in topic.output


def test_a_bad_value_under_json_logs_is_one_json_record() -> None:
    done = program("consumer", "--log-format", "json", ORDO_CONSUMER_SHARD="first/2")
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    record = json.loads(line)
    assert record["level"] == "error" and record["message"].startswith("error: invalid setting ORDO_CONSUMER_SHARD=")


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
