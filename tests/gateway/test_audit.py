"""The audit log (``walgate.audit``): one line per DDL over SQL and per Kafka admin change, secrets masked.

A real node in process; confluent-kafka's AdminClient makes the Kafka changes, aiohttp the SQL ones. Lines are
checked through the JSON formatter ``--log-format json`` uses.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from coordinator_admin import deleted_groups
from walgate.gateway.audit import audit, sql_change
from walgate.gateway.config import Config
from walgate.gateway.logs import JsonFormatter
from walgate.gateway.server import Gateway
from walgate.security.secrets import mask_secrets


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    formatter = JsonFormatter()
    return [json.loads(formatter.format(r)) for r in caplog.records if r.name == "walgate.audit"]


def test_secrets_are_masked() -> None:
    assert mask_secrets("CREATE USER alice PASS 'taosdata'") == "CREATE USER alice PASS '***'"
    assert mask_secrets("alter user bob pass 'it''s \"secret\"' SYSINFO 0") == "alter user bob pass '***' SYSINFO 0"
    assert mask_secrets('CREATE USER c PASSWORD "x y"') == "CREATE USER c PASSWORD '***'"
    assert mask_secrets("CREATE USER d PASS 'unterminated") == "CREATE USER d PASS '***'"
    assert mask_secrets("sasl password=hunter2, token: abc.def") == "sasl password=***, token: ***"
    assert mask_secrets("DROP DATABASE power") == "DROP DATABASE power"


def test_which_statements_are_audited() -> None:
    assert sql_change("  create   database power VGROUPS 2") == "CREATE DATABASE"
    assert sql_change("DROP CONSUMER  GROUP g ON t") == "DROP CONSUMER GROUP"
    assert sql_change("ALTER USER x PASS 'y'") == "ALTER USER"
    assert sql_change("drop dnode 3") == "DROP DNODE"
    assert sql_change("REDISTRIBUTE VGROUP 2 DNODE 1") == "REDISTRIBUTE VGROUP"
    assert sql_change("BALANCE VGROUP LEADER") == "BALANCE VGROUP"
    assert sql_change("GRANT READ ON power.* TO alice") == "GRANT"
    for query in ("SELECT * FROM power.meters", "INSERT INTO power.d1 VALUES (now, 1)", "SHOW DATABASES", "USE power",
                  "CREATED", ""):
        assert sql_change(query) is None, query


def test_a_line_has_its_fields_and_no_secret(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "walgate.audit")
    audit("User:root", "10.0.0.7", "CREATE USER", "CREATE USER alice\n PASS 'hunter2'", "failed: password='hunter2'")
    [line] = lines(caplog)
    assert line["level"] == "INFO" and line["principal"] == "User:root" and line["peer"] == "10.0.0.7"
    assert line["operation"] == "CREATE USER" and line["resource"] == "CREATE USER alice PASS '***'"
    assert "hunter2" not in json.dumps(line)


def kafka_admin_changes(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("orders", 1), NewTopic("bad name!", 1)]).values():
        future.exception(30)
    admin.create_topics([NewTopic("dry", 1)], validate_only=True)["dry"].result(30)  # changes nothing: not logged
    admin.create_partitions([NewPartitions("orders", 3)])["orders"].result(30)
    resource = ConfigResource("topic", "orders", incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    admin.delete_records([TopicPartition("orders", 0, 0)])[TopicPartition("orders", 0, 0)].result(30)
    assert set(deleted_groups(bootstrap, ["nobody"], 30)) == {"nobody"}  # answered
    for future in admin.delete_topics(["orders", "missing"]).values():
        future.exception(30)


async def test_sql_ddl_and_kafka_admin_changes_are_audited(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "walgate.audit")
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)
    async with Gateway(config) as gateway:
        host, port = gateway.http_address
        async with aiohttp.ClientSession() as http:
            for statement in ("CREATE DATABASE power VGROUPS 1", "DROP DATABASE nothere", "SHOW DATABASES",
                              "CREATE USER alice PASS 'hunter2'"):
                async with http.post(f"http://{host}:{port}/rest/sql", data=statement.encode()) as response:
                    await response.read()
        await asyncio.to_thread(kafka_admin_changes, f"127.0.0.1:{gateway.kafka_address[1]}")

    got = [(line["operation"], line["resource"], line["outcome"].split(":")[0]) for line in lines(caplog)]
    assert got[:3] == [("CREATE DATABASE", "CREATE DATABASE power VGROUPS 1", "ok"),
                       ("DROP DATABASE", "DROP DATABASE nothere", "failed"),
                       ("CREATE USER", "CREATE USER alice PASS '***'", got[2][2])]
    assert sorted(got[3:]) == sorted([
        ("CreateTopics", "topic orders", "ok"),
        ("CreateTopics", "topic bad name!", "failed"),
        ("CreatePartitions", "topic orders to 3 partitions", "ok"),
        ("IncrementalAlterConfigs", "topic orders (retention.ms set)", "ok"),
        ("DeleteRecords", "topic orders partition 0 before offset 0", "ok"),
        ("DeleteGroups", "group nobody", "failed"),
        ("DeleteTopics", "topic orders", "ok"),
        ("DeleteTopics", "topic missing", "failed"),
    ])
    assert {line["principal"] for line in lines(caplog)} == {"User:ANONYMOUS"}
    assert {line["peer"] for line in lines(caplog)} == {"127.0.0.1"}
    assert "hunter2" not in caplog.text and "86400000" not in caplog.text
