"""``walgate`` as users run it: real subprocesses against a real ``walgate serve``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from livewalgate import WALGATE, WalgateServer, free_port, running_walgate, walgate_env
from walgate.gateway.cli import split_statements
from walgate.gateway.config import Config, ConfigError, load_config

CLI_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def walgate_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WalgateServer]:
    """One ``walgate serve`` for the module's tests (each uses its own database), not one per test."""
    with running_walgate(tmp_path_factory.mktemp("cli")) as server:
        yield server


def schema(db: str) -> str:
    """Database ``db`` (each test on the module's server has its own) with supertable meters and subtable d1001."""
    return (
        f"CREATE DATABASE {db} VGROUPS 2; USE {db};"
        " CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) TAGS (location VARCHAR(64), groupid INT);"
        " CREATE TABLE d1001 USING meters TAGS ('California.SanFrancisco', 2)"
    )


SCHEMA = schema("power")


def walgate(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run one ``walgate`` command to completion (bounded)."""
    return subprocess.run(
        [*WALGATE, *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        env=walgate_env(),
    )


def sql(server: WalgateServer, *args: str) -> subprocess.CompletedProcess[str]:
    return walgate("sql", "--url", server.http_url, *args)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def json_results(server: WalgateServer, statements: str) -> list[dict]:
    return [json.loads(line) for line in ok(sql(server, "--json", statements)).splitlines()]


# ----------------------------------------------------------------- serve / sql


def test_serve_logs_ready_once_and_sql_runs_statements(walgate_server: WalgateServer) -> None:
    assert walgate_server.log().count("ready") == 1
    out = ok(sql(walgate_server, SCHEMA + ";INSERT INTO d1001 VALUES ('2018-10-03 14:38:05', 10.3, 219, 0.31)"))
    assert "Database changed to power." in out
    assert "Query OK, 1 row(s) affected" in out
    out = ok(sql(walgate_server, "--db", "power", "SELECT ts, voltage, location FROM meters"))
    assert "California.SanFrancisco" in out and "219" in out
    assert "Query OK, 1 row(s) in set" in out


def test_a_serving_node_freezes_its_start_and_counts_full_collections(walgate_server: WalgateServer) -> None:
    """``walgate serve`` freezes what it loaded at start for the garbage collector once ready (walgate.gateway
    .gc_policy) and reports the collector's passes by generation in ``/metrics``."""
    with urllib.request.urlopen(f"{walgate_server.http_url}/metrics", timeout=CLI_TIMEOUT) as response:
        samples = {(s.name, s.labels.get("generation")): s.value
                   for family in text_string_to_metric_families(response.read().decode()) for s in family.samples}
    assert samples[("walgate_gc_frozen_objects", None)] > 10_000  # (a node's modules and catalog: ~100,000 objects)
    assert ("python_gc_collections_total", "2") in samples


def test_sql_json_prints_one_result_per_statement(walgate_server: WalgateServer) -> None:
    ok(sql(walgate_server, schema("power_json")))
    results = json_results(walgate_server, "USE power_json; INSERT INTO d1001 VALUES ('2018-10-03 14:38:05', 10.3, 219, 0.31); SELECT voltage FROM meters")
    assert [r["code"] for r in results] == [0, 0, 0]
    assert results[0]["database"] == "power_json"
    assert results[1]["data"] == [[1]]
    assert results[2]["data"] == [[219]]


def test_sql_error_exits_non_zero_with_the_message_on_stderr(walgate_server: WalgateServer) -> None:
    result = sql(walgate_server, "SHOW DATABASES; SELECT * FROM nosuch.meters; SHOW DATABASES")
    assert result.returncode == 1
    assert "nosuch" in result.stderr
    assert result.stdout.count("row(s) in set") == 1  # stopped at the failing statement


def test_sql_without_a_server_exits_non_zero() -> None:
    result = walgate("sql", "--url", f"http://127.0.0.1:{free_port()}", "SHOW DATABASES")
    assert result.returncode == 1
    assert "cannot reach walgate" in result.stderr


# ---------------------------------------------------------------------- ingest


def test_ingest_line_protocol_from_a_file_and_stdin(walgate_server: WalgateServer, tmp_path: Path) -> None:
    ok(sql(walgate_server, schema("power_lp")))
    lines = tmp_path / "meters.lp"
    lines.write_bytes(
        b"weather,location=California.SanFrancisco temperature=18.5,humidity=61i32 1538548685000\n"
        b"weather,location=California.LosAngeles temperature=24.1,humidity=43i32 1538548685000\n"
    )
    url = ("--url", walgate_server.http_url)
    assert ok(walgate("ingest", *url, "--format", "line", "--db", "power_lp", "--precision", "ms", str(lines))).strip() == "2 row(s) written to power_lp"
    stdin = b"weather,location=California.LosAngeles temperature=24.3,humidity=42i32 1538548745\n"
    assert "1 row(s) written" in ok(walgate("ingest", *url, "--format", "line", "--db", "power_lp", "--precision", "s", "-", stdin=stdin))
    assert json_results(walgate_server, "SELECT * FROM power_lp.weather")[0]["rows"] == 3


def test_ingest_csv(walgate_server: WalgateServer, tmp_path: Path) -> None:
    ok(sql(walgate_server, schema("power_csv")))
    csv = tmp_path / "d1001.csv"
    csv.write_text("ts,current,voltage,phase\n2018-10-03 14:38:05.000,10.3,219,0.31\n2018-10-03 14:38:15.000,12.6,218,0.33\n")
    out = ok(walgate("ingest", "--url", walgate_server.http_url, "--format", "csv", "--db", "power_csv", "--table", "d1001", str(csv)))
    assert out.strip() == "2 row(s) written to power_csv"


def test_ingest_bad_input_exits_non_zero_and_writes_nothing(walgate_server: WalgateServer, tmp_path: Path) -> None:
    ok(sql(walgate_server, schema("power_bad")))
    bad = tmp_path / "bad.lp"
    bad.write_bytes(b"weather,location=x temperature=1.0 1538548685000\nweather temperature=\n")
    result = walgate("ingest", "--url", walgate_server.http_url, "--format", "line", "--db", "power_bad", str(bad))
    assert result.returncode == 1
    assert "line 2" in result.stderr.lower()
    assert sql(walgate_server, "SELECT * FROM power_bad.weather").returncode == 1  # not even the supertable exists


@pytest.mark.parametrize(
    "args",
    [
        ("--format", "line", "--db", "power", "--table", "t", "-"),
        ("--format", "csv", "--db", "power", "--precision", "ms", "-"),
        ("--format", "csv", "--db", "power", "/nonexistent/file.csv"),
    ],
)
def test_ingest_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    result = walgate("ingest", "--url", f"http://127.0.0.1:{free_port()}", *args)
    assert result.returncode == 2 and "walgate:" in result.stderr


# ------------------------------------------------------------------- lifecycle


def test_sigterm_exits_0_and_data_survives_restart(tmp_path: Path) -> None:
    with running_walgate(tmp_path / "first") as server:
        ok(sql(server, SCHEMA + ";INSERT INTO d1001 VALUES ('2018-10-03 14:38:05', 10.3, 219, 0.31)"))
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=15) == 0
        assert "walgate stopped" in server.log()
    with running_walgate(tmp_path / "second", data_dir=server.data_dir) as again:
        assert json_results(again, "SELECT * FROM power.meters")[0]["rows"] == 1
        again.proc.send_signal(signal.SIGINT)
        assert again.proc.wait(timeout=15) == 0


def test_serve_without_data_dir_exits_2() -> None:
    result = walgate("serve", "--http-port", "0")
    assert result.returncode == 2
    assert "data_dir is required" in result.stderr


def test_serve_on_a_busy_port_exits_1(walgate_server: WalgateServer, tmp_path: Path) -> None:
    port = walgate_server.http_url.rsplit(":", 1)[1]
    result = walgate("serve", "--data-dir", str(tmp_path / "other"), "--http-port", port)
    assert result.returncode == 1
    assert "walgate failed" in result.stderr


def test_serve_reads_config_file_then_env_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "walgate.toml"
    config.write_text(f'data_dir = "{tmp_path / "from-file"}"\nlog_level = "error"\n')
    env = walgate_env() | {"WALGATE_LOG_LEVEL": "debug"}  # env beats the file (else no ready line at all)
    with running_walgate(tmp_path / "run", "--config", str(config), env=env, data_dir=tmp_path / "flag-data") as server:
        assert "DEBUG" in server.log()
        ok(sql(server, "CREATE DATABASE db1"))
    assert (tmp_path / "flag-data").is_dir() and not (tmp_path / "from-file").exists()


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "walgate"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=CLI_TIMEOUT)
    assert result.returncode == 0
    assert all(command in result.stdout for command in ("serve", "sql", "ingest", "demo"))


# ------------------------------------------------------------ pure functions


@pytest.mark.parametrize(
    ("text", "statements"),
    [
        ("SHOW DATABASES", ["SHOW DATABASES"]),
        (" USE power ; SHOW TABLES ;; ", ["USE power", "SHOW TABLES"]),
        ("INSERT INTO t VALUES (now, 'a;b'); SELECT 1", ["INSERT INTO t VALUES (now, 'a;b')", "SELECT 1"]),
        ("SELECT \"x;y\", `c;d` FROM t", ["SELECT \"x;y\", `c;d` FROM t"]),
        (r"INSERT INTO t VALUES ('it\'s;', 'a''b;c');X", [r"INSERT INTO t VALUES ('it\'s;', 'a''b;c')", "X"]),
        ("  ;  ", []),
    ],
)
def test_split_statements(text: str, statements: list[str]) -> None:
    assert split_statements(text) == statements


def test_config_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    file = tmp_path / "walgate.toml"
    file.write_text('data_dir = "/from/file"\nhost = "10.0.0.1"\nhttp_port = 7000\nkafka_port = 7001\nnode_id = 3\n')
    env = {"WALGATE_HTTP_PORT": "7100", "WALGATE_KAFKA_PORT": "7101", "UNRELATED": "x"}
    config = load_config(file, env=env, overrides={"kafka_port": 7201, "host": None})
    assert config == Config(
        data_dir=Path("/from/file"), host="10.0.0.1", http_port=7100, kafka_port=7201, node_id=3,
        advertised_host="10.0.0.1", advertised_port=7201,
    )
    assert config.max_request_bytes == 16 << 20 and config.log_level == "INFO"


def test_resource_limits_default_and_come_from_every_source(tmp_path: Path) -> None:
    config = load_config(env={"WALGATE_DATA_DIR": "d"})
    assert (config.queued_max_request_bytes, config.request_read_timeout_ms, config.listen_backlog,
            config.max_partitions) == (100 << 20, 30_000, 4096, 10_000)
    big = load_config(env={"WALGATE_DATA_DIR": "d", "WALGATE_MAX_REQUEST_BYTES": str(200 << 20)})
    assert big.queued_max_request_bytes == 200 << 20  # the largest accepted request always fits
    file = tmp_path / "walgate.toml"
    file.write_text('data_dir = "d"\nlisten_backlog = 512\n')
    config = load_config(file, env={"WALGATE_REQUEST_READ_TIMEOUT_MS": "5000"},
                         overrides={"queued_max_request_bytes": 32 << 20, "max_partitions": 400})
    assert (config.queued_max_request_bytes, config.request_read_timeout_ms, config.listen_backlog,
            config.max_partitions) == (32 << 20, 5000, 512, 400)


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("", {}, "data_dir is required"),
        ('data_dir = "d"\nbogus = 1\n', {}, "unknown key(s) bogus"),
        ('data_dir = "d"\nhttp_port = "x"\n', {}, "http_port must be an integer"),
        ('data_dir = "d"\n', {"WALGATE_KAFKA_PORT": "70000"}, "kafka_port must be in 0..65535"),
        ('data_dir = "d"\n', {"WALGATE_LOG_LEVEL": "loud"}, "log_level must be one of"),
        ("data_dir = \n", {}, "walgate.toml"),
        ('data_dir = "d"\n', {"WALGATE_GROUP_INITIAL_REBALANCE_DELAY_MS": "-1"}, "must be >= 0"),
        ('data_dir = "d"\ngroup_min_session_timeout_ms = 9000\n', {"WALGATE_GROUP_MAX_SESSION_TIMEOUT_MS": "8000"},
         "group_min_session_timeout_ms <= group_max_session_timeout_ms"),
        ('data_dir = "d"\ngroup_consumer_heartbeat_interval_ms = 45000\n', {},
         "group_consumer_heartbeat_interval_ms < group_consumer_session_timeout_ms"),
        ('data_dir = "d"\nqueued_max_request_bytes = 1000\n', {}, "must be >= max_request_bytes"),
        ('data_dir = "d"\n', {"WALGATE_LISTEN_BACKLOG": "0"}, "listen_backlog must be > 0"),
        ('data_dir = "d"\n', {"WALGATE_REQUEST_READ_TIMEOUT_MS": "0"}, "request_read_timeout_ms must be > 0"),
        ('data_dir = "d"\nmax_partitions = -5\n', {}, "max_partitions must be > 0"),
        ('data_dir = "d"\noffsets_topic_num_partitions = 0\n', {}, "offsets_topic_num_partitions must be > 0"),
    ],
)
def test_config_errors(tmp_path: Path, toml: str, env: dict[str, str], message: str) -> None:
    file = tmp_path / "walgate.toml"
    file.write_text(toml)
    with pytest.raises(ConfigError) as error:
        load_config(file, env=env)
    assert message in str(error.value)


def test_cli_and_server_agree_on_the_rows_header() -> None:
    from walgate.gateway import cli, http_api

    assert cli.ROWS_HEADER == http_api.ROWS_HEADER
