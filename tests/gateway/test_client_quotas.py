"""Client quotas: the rate arithmetic and Kafka's precedence with a fake clock (walgate/gateway/quotas.py), then
AlterClientQuotas / DescribeClientQuotas, throttled Produce and Fetch and a restart over a real socket (kio encodes
the requests and decodes the answers)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes
from kafka.record.memory_records import MemoryRecordsBuilder
from kio.schema.errors import ErrorCode

from walgate.gateway.quotas import SAMPLES, WINDOW_S, ClientQuotas
from walgate.storage.quotas import entity


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def quotas(config: dict[tuple[tuple[str, str | None], ...], dict[str, float]]) -> tuple[ClientQuotas, Clock]:
    clock = Clock()
    q = ClientQuotas(clock)
    q.configure(config)
    return q, clock


def test_no_quota_measures_nothing() -> None:
    q, _ = quotas({})
    assert q.keys == frozenset()
    assert q.produce("User:alice", "app", 10**12) == q.fetch("User:alice", "app", 10**12) == 0
    assert q.request_time(0, "User:alice", "app", 100.0) == 0


def test_throttle_time_is_kafkas_formula_over_ten_windows() -> None:
    q, clock = quotas({entity([("user", None)]): {"producer_byte_rate": 1000.0}})
    assert q.produce("User:alice", "app", 10_000) == 0  # 10 000 bytes over the 10 s minimum span: 1000 B/s, the bound
    assert q.produce("User:alice", "app", 10_000) == 10_000  # 2000 B/s: (2000 - 1000) / 1000 * 10 s
    assert q.produce("User:bob", "app", 10_000) == 0  # a default-user quota: every user has a rate of its own
    clock.now += SAMPLES * WINDOW_S  # every sample of alice's expired
    assert q.produce("User:alice", "app", 5_000) == 0


def test_kafkas_precedence_and_which_clients_share_a_rate() -> None:
    q, _ = quotas({
        entity([("user", "alice"), ("client-id", "app")]): {"producer_byte_rate": 100.0},
        entity([("user", "alice")]): {"producer_byte_rate": 1000.0},
        entity([("user", None)]): {"producer_byte_rate": 10.0},
        entity([("client-id", None)]): {"producer_byte_rate": 1.0},
    })
    assert q.produce("User:alice", "app", 1000) == 0  # (alice, app): 100 B/s, exactly reached
    assert q.produce("User:alice", "app", 1) > 0
    assert q.produce("User:alice", "other", 5000) == 0  # alice: 1000 B/s shared by her other client ids
    assert q.produce("User:alice", "third", 5000) == 0
    assert q.produce("User:alice", "third", 1) > 0
    assert q.produce("User:ANONYMOUS", None, 100) == 0  # the default user: 10 B/s
    assert q.produce("User:ANONYMOUS", None, 1) > 0


def test_a_fetch_over_its_quota_is_not_counted_and_request_time_is_capped_at_one_window() -> None:
    q, _ = quotas({entity([("client-id", "c")]): {"consumer_byte_rate": 100.0, "request_percentage": 10.0}})
    assert q.fetch("User:x", "c", 1000) == 0
    assert q.fetch("User:x", "c", 5000) == 50_000  # over: answered empty, so not counted ...
    assert q.fetch("User:x", "c", 0) == 0  # ... and the rate is back at the bound
    assert q.fetch_window_bytes("User:x", "c") == 1000  # 100 B/s over 10 windows: one answer never exceeds it
    assert q.fetch_window_bytes("User:x", "other") is None
    assert q.request_time(3, "User:x", "c", 1.0) == 0  # 100 % of a second over 10 s: 10 %
    assert q.request_time(3, "User:x", "c", 50.0) == 1000  # capped at one window, as Kafka's request quota
    assert q.request_time(18, "User:x", "c", 50.0) == 0  # ApiVersions is exempt
    assert q.request_time(1, "User:x", "c", 50.0) == 0  # so is Fetch: a long-poll's wait is no work
    assert q.request_time(78, "User:x", "c", 50.0) == 0  # and ShareFetch, a long poll too
    assert q.request_time(79, "User:x", "c", 50.0) == 1000  # ShareAcknowledge is not


def call(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> Any:
    request_cls, _ = kio_classes(api_key, version)
    return conn.request(build(request_cls, values))


def alter(conn: KafkaConnection, entries: list[tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]]],
          validate_only: bool = False) -> list[tuple[int, str | None]]:
    response = call(conn, 49, 1, {"validate_only": validate_only, "entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in pairs],
         "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops]} for pairs, ops in entries]})
    return [(e.error_code, e.error_message) for e in response.entries]


def describe(conn: KafkaConnection, components: list[tuple[str, int, str | None]], strict: bool = False) -> Any:
    return call(conn, 48, 1, {"strict": strict, "components": [
        {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]})


def described(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == ErrorCode.none, response
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def batch(size: int) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=b"k", value=b"v" * size)
    builder.close()
    return bytes(builder.buffer())


def test_quotas_are_altered_described_enforced_and_kept_across_a_restart(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gateway, KafkaConnection(gateway.kafka_address, client_id="app") as conn:
        call(conn, 19, 7, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1}], "timeout": 10_000})
        assert alter(conn, [
            ([("user", None)], [("producer_byte_rate", 1000, False), ("consumer_byte_rate", 100, False)]),
            ([("user", "alice"), ("client-id", "app")], [("request_percentage", 200, False)]),
            ([("user", "bob")], [("producer_byte_rate", 1.5, False)]),
            ([("ip", "10.0.0.1")], [("connection_creation_rate", 5, False)]),
            ([("user", "carol")], [("bogus", 5, False)]),
            ([], [("producer_byte_rate", 5, False)]),
            ([("user", None)], [("producer_byte_rate", 5, False)]),
        ]) == [(0, None), (0, None),
               (ErrorCode.invalid_request, "1.5 for producer_byte_rate is not a valid integer"),
               (ErrorCode.invalid_request, "ip quota entities (connection rates) are not supported by walgate"),
               (ErrorCode.invalid_request, "Invalid configuration key bogus"),
               (ErrorCode.invalid_request, "Invalid empty client quota entity"),
               (ErrorCode.invalid_request, "Ignoring duplicate entity user <default>")]
        assert alter(conn, [([("user", "dave")], [("producer_byte_rate", 7, False)])], validate_only=True) == [(0, None)]
        state = {(("user", None),): {"producer_byte_rate": 1000.0, "consumer_byte_rate": 100.0},
                 (("client-id", "app"), ("user", "alice")): {"request_percentage": 200.0}}
        assert described(describe(conn, [])) == state
        assert described(describe(conn, [("user", 1, None)], strict=True)) == {(("user", None),): state[(("user", None),)]}
        assert describe(conn, [("group", 2, None)]).error_code == ErrorCode.unsupported_version
        assert describe(conn, [("user", 0, None)]).error_code == ErrorCode.invalid_request

        # anonymous: the default user's quotas apply
        produced = call(conn, 0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": batch(10_200)}]}]})
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
        # 10.2 kB over 10 s: 1020 B/s > 1000 B/s, a throttle of some 200 ms (the connection reads nothing meanwhile)
        assert produced.throttle_time.total_seconds() * 1000 > 0
        fetched = call(conn, 1, 12, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "replica_id": -1, "topics": [
            {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                           "current_leader_epoch": -1, "log_start_offset": -1,
                                           "last_fetched_epoch": -1}]}]})
        assert fetched.throttle_time.total_seconds() * 1000 > 0 and fetched.responses == ()  # over: answered empty

    with gateway_thread(tmp_path / "data") as gateway, KafkaConnection(gateway.kafka_address) as conn:
        assert described(describe(conn, [])) == state
        assert alter(conn, [([("user", None)], [("producer_byte_rate", 0, True), ("consumer_byte_rate", 0, True)])]) \
            == [(0, None)]
        assert described(describe(conn, [("user", 2, None)])) == {(("client-id", "app"), ("user", "alice")):
                                                                 {"request_percentage": 200.0}}
        produced = call(conn, 0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": batch(20_000)}]}]})
        assert produced.throttle_time.total_seconds() == 0  # the quota went with its entity


def test_an_acks0_produce_over_its_quota_mutes_the_connection(tmp_path: Path) -> None:
    """No answer carries the throttle of an acks=0 Produce: the connection reads nothing for that long (some 200 ms
    for 10.2 kB over 1000 B/s), so the ApiVersions sent right after it is answered no sooner (a lower bound only)."""
    with gateway_thread(tmp_path / "data") as gateway, KafkaConnection(gateway.kafka_address) as conn:
        call(conn, 19, 7, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1}], "timeout": 10_000})
        assert alter(conn, [([("user", None)], [("producer_byte_rate", 1000, False)])]) == [(0, None)]
        produce_cls, _ = kio_classes(0, 9)
        started = time.monotonic()
        conn.send(build(produce_cls, {"acks": 0, "timeout": 10_000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": batch(10_200)}]}]}))
        assert call(conn, 18, 3, {"client_software_name": "q", "client_software_version": "1"}).error_code == 0
        assert time.monotonic() - started >= 0.15
