"""pipeline/meters.py's Kafka client options: ``--kafka-option KEY=VALUE`` and ``--sasl-user`` with
``--sasl-password-file`` become the settings Spark's Kafka source gets as ``kafka.<KEY>`` options. (A Java
kafka-clients run with exactly these settings over SASL_SSL: compat-tests/test_security_sasl_ssl.py.) Its
starting and ending options; what Spark does with them: test_spark_kafka_source.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import meters


def options(*argv: str) -> dict[str, str]:
    return meters.client_options(meters.parser().parse_args(["--out", "o", *argv]))


def test_no_options_is_no_settings():
    assert options() == {}


def test_kafka_options_pass_through_with_values_containing_equals():
    assert options("--kafka-option", "security.protocol=SASL_SSL", "--kafka-option", "ssl.truststore.type=PEM",
                   "--kafka-option", "client.id=a=b", "--kafka-option", "ssl.endpoint.identification.algorithm=") \
        == {"security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM", "client.id": "a=b",
            "ssl.endpoint.identification.algorithm": ""}


def test_source_options_of_a_stream_a_backfill_and_a_starting_timestamp():
    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "topic_meters"}
    args = meters.parser().parse_args(["--out", "o", "--ending-offsets", "latest", "--kafka-option", "a=b"])
    assert meters.source_options(args, streaming=True) == {**base, "kafka.a": "b", "startingOffsets": "earliest"}
    assert meters.source_options(args, streaming=False) == {**base, "kafka.a": "b", "endingOffsets": "latest"}
    since = ["--out", "o", "--starting-offsets", "latest", "--starting-timestamp", "1700000040000"]
    for strategy, chosen in ((None, []), ("error", ["--starting-timestamp-strategy", "error"]),
                             ("latest", ["--starting-timestamp-strategy", "latest"])):
        args = meters.parser().parse_args([*since, *chosen])
        assert meters.source_options(args, streaming=True) == {
            **base, "startingTimestamp": "1700000040000", "startingOffsetsByTimestampStrategy": strategy or "error"}


@pytest.mark.parametrize(("mechanism", "module"), [
    (None, "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
])
def test_the_password_file_makes_the_jaas_config_of_the_mechanism(tmp_path: Path, mechanism: str | None, module: str):
    secret = tmp_path / "secret"
    secret.write_text('p"w\\d\n')  # a JAAS quoted string escapes " and \
    chosen = ["--kafka-option", f"sasl.mechanism={mechanism}"] if mechanism else []
    got = options(*chosen, "--sasl-user", "root", "--sasl-password-file", str(secret))
    assert got == {"sasl.mechanism": mechanism or "SCRAM-SHA-512",
                   "sasl.jaas.config": f'{module} required username="root" password="p\\"w\\\\d";'}


@pytest.mark.parametrize("argv", [["--kafka-option", "no-equals"], ["--kafka-option", "=value"],
                                  ["--sasl-user", "root"], ["--sasl-password-file", "f"],
                                  ["--sasl-user", "root", "--sasl-password-file", "/nonexistent/secret"],
                                  ["--starting-timestamp-strategy", "latest"],
                                  ["--starting-timestamp", "1", "--starting-timestamp-strategy", "earliest"],
                                  ["--sasl-user", "root", "--sasl-password-file", __file__,
                                   "--kafka-option", "sasl.mechanism=GSSAPI"]])
def test_malformed_options_are_usage_errors_before_spark_starts(argv: list[str], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as usage:
        meters.main(["--out", str(tmp_path / "o"), "--batch", *argv])
    assert usage.value.code == 2 and "usage:" in capsys.readouterr().err
