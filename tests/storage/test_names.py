"""Identifiers are validated (TDengine's and Kafka's rules) and never become paths (issue 13, item 1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue
from walgate.storage.names import (
    is_db_id,
    is_topic_id,
    new_db_id,
    validate_column_name,
    validate_database_name,
    validate_sql_topic_name,
    validate_table_name,
)

ATTACKS = ["../../x", "..", ".", "/tmp/walgate-abs", "a/b", "a\0b", "x" * 65, "x" * 10_000, "", "1db", "a b", "ä"]


def tree(root: Path) -> set[str]:
    """Every path under ``root`` (relative), to show nothing appeared anywhere else."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("name", ATTACKS)
def test_database_names_that_are_paths_are_refused_and_create_nothing(tmp_path: Path, name: str):
    data = tmp_path / "data"
    e = Engine.open(data)
    before_outside = set(os.listdir(tmp_path))
    before = tree(data)
    with pytest.raises(InvalidValue, match="Invalid database name"):
        e.catalog.create_database(name, {}, 0)
    assert set(os.listdir(tmp_path)) == before_outside == {"data"}
    assert tree(data) == before
    assert not Path("/tmp/walgate-abs").exists()
    e.close()


@pytest.mark.parametrize("sql", ["CREATE DATABASE `../../x`", "CREATE DATABASE `/tmp/walgate-abs`", "CREATE DATABASE `a/b`",
                                 f"CREATE DATABASE `{'x' * 300}`"])
def test_create_database_sql_attack_is_refused(tmp_path: Path, sql: str):
    data = tmp_path / "data"
    e = Engine.open(data)
    with pytest.raises(InvalidValue):
        e.execute(sql)
    assert os.listdir(tmp_path) == ["data"] and not (tmp_path / "x").exists() and not Path("/tmp/walgate-abs").exists()
    assert e.execute("SHOW DATABASES").rows == []
    e.close()


def test_no_user_name_reaches_a_path(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE power_db VGROUPS 2")
    e.execute("CREATE STABLE power_db.meters_st (ts TIMESTAMP, v INT) TAGS (site_tag INT)")
    e.execute("INSERT INTO power_db.dev_one USING power_db.meters_st TAGS (1) VALUES (1000, 1)")
    e.execute("CREATE TOPIC sql_topic AS STABLE power_db.meters_st")
    e.create_kafka_topic("kafka.topic-x", 2, {})
    e.close()
    names = ("power_db", "meters_st", "dev_one", "sql_topic", "kafka", "topic-x")
    leaked = [p for p in tree(tmp_path) if any(n in p for n in names)]
    assert leaked == []
    assert all(is_db_id(p.name) for p in (tmp_path / "db").iterdir())
    assert all(is_topic_id(p.stem) for p in tmp_path.glob("db/*/vnode*/topics/*"))


@pytest.mark.parametrize("name", ["../x", "a.b", "a/b", "x" * 193, "", "a\nb", "k$"])
def test_sql_topic_names_follow_tdengine_and_kafka(tmp_path: Path, name: str):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE d VGROUPS 1")
    with pytest.raises(InvalidValue, match="Invalid topic name"):
        e.catalog.create_topic(name, "database", "d", "", False, "CREATE TOPIC x AS DATABASE d", 0)
    assert e.catalog.topics == {}
    e.close()


@pytest.mark.parametrize("name", ["../../x", "..", ".", "a/b", "a\0b", "x" * 250, ""])
def test_kafka_topic_names_follow_kafka(tmp_path: Path, name: str):
    e = Engine.open(tmp_path)
    with pytest.raises(InvalidValue, match="Invalid topic name"):
        e.create_kafka_topic(name, 1, {})
    assert e.catalog.topics == {} and e.catalog.databases == {}
    e.close()


def test_long_kafka_topic_gets_a_valid_backing_database(tmp_path: Path):
    e = Engine.open(tmp_path)
    topic = e.create_kafka_topic("t" * 249, 1, {})
    validate_database_name(topic.db)
    e.close()


def test_rules():
    for ok in ("d", "_d", "D9_x", "x" * 64):
        validate_database_name(ok)
    for ok in ("t", "1970", "abc@TD", "中文", "a b", "x" * 192):
        validate_table_name(ok)
    for bad in ("", "a.b", "a`b", "a\0b", "a\nb", "x" * 193, "中" * 65):  # 65 * 3 bytes > 192
        with pytest.raises(InvalidValue, match="Invalid table name"):
            validate_table_name(bad)
    validate_column_name("c" * 64)
    with pytest.raises(InvalidValue, match="Invalid column name"):
        validate_column_name("c" * 65)
    validate_sql_topic_name("topic-1_x")
    assert is_db_id(new_db_id()) and not is_db_id("../x") and not is_db_id("A" * 32)
    assert not is_topic_id("../../x") and is_topic_id("72a546f3-d963-47fd-8ae8-dc216f37cf63")


def test_stable_and_column_names_are_checked_where_the_catalog_creates_them(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE d VGROUPS 1")
    with pytest.raises(InvalidValue, match="Invalid table name"):
        e.execute("CREATE STABLE d.`a.b` (ts TIMESTAMP, v INT) TAGS (t INT)")
    with pytest.raises(InvalidValue, match="Invalid column name"):
        e.execute(f"CREATE STABLE d.st (ts TIMESTAMP, `{'v' * 65}` INT) TAGS (t INT)")
    e.execute("CREATE STABLE d.st (ts TIMESTAMP, v INT) TAGS (t INT)")
    with pytest.raises(InvalidValue, match="Invalid column name"):
        e.execute("ALTER STABLE d.st ADD COLUMN `a\tb` INT")
    assert e.execute("SHOW STABLES", "d").rows[0][0] == "st" and len(e.catalog.stables) == 1
    e.close()
