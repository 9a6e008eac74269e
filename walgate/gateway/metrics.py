"""Prometheus metrics of one node (``GET /metrics``), named and labelled as Kafka users already chart them.

Names follow the JMX exporter's rendering of Kafka's MBeans (``kafka_network_requestmetrics_*``,
``kafka_server_brokertopicmetrics_*``, ``kafka_log_log_*``) and danielqsj/kafka_exporter for offsets and lag
(``kafka_topic_partition_current_offset``, ``kafka_consumergroup_lag``, ...); what Kafka has no name for is
``walgate_*``. docs/metrics.md lists every metric. A cluster node's replication metrics (Kafka's ReplicaManager,
KafkaController and fetcher-lag names) come from :mod:`walgate.gateway.replica_status`, whose collector ``walgate
serve`` registers in the same registry once its replica manager runs.

Two kinds of values, and no copy of state:

* events, counted where they happen: requests, their latency split as Kafka's RequestMetrics (request queue,
  local, response send, total), bytes and records per topic, connections (event loop, :meth:`Metrics.request`,
  :meth:`Metrics.connection`); each lane's calls (:meth:`Metrics.lane_calls`, on that lane's thread). Each
  :class:`Metrics` has its own registry, so several gateways can run in one process.
* state (partitions, consumer groups, share groups, committed offsets and lag, the batch cache, the lanes' queues,
  fsync latency): produced at scrape time by :class:`StateCollector`, which asks the lanes for it in bounded steps:
  one storage-thread call for the topic ids and the list of partitions, one coordinator-lane
  call for the groups, the share groups' counts and the committed offsets (a copy of the coordinator's map; asked from the event loop, so the
  storage thread never waits for it), then one storage-thread call per :data:`SCRAPE_PAGE` partitions (their offsets
  and their WALs' sizes), so a
  scrape of many partitions holds the storage thread for one page at a time and the calls queued meanwhile
  (Produce, Fetch) run between pages. The pages are read at slightly different moments: a partition created meanwhile waits for the
  next scrape, one dropped meanwhile is left out. Per-topic traffic is kept by topic key (a name, or a topic id for
  Fetch v13+) and named at scrape time with the first call.

:meth:`Metrics.render` blocks until the storage thread answered every page (at most ``SCRAPE_TIMEOUT`` seconds in
all, then ``TimeoutError``): call it off the event loop (``asyncio.to_thread``), which is where the collector's
storage calls are submitted back to the loop from.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from walgate.coordinator import GroupCoordinator, GroupStats
from walgate.coordinator.share_coordinator import ShareGroupStats
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine, PartitionStats
from walgate.storage.fileio import LatencyRecorder, SyncLatency
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import WIRE_VERSIONS, RequestHeader, request_class
from walgate.wire.record_batch import BATCH_HEADER_SIZE, batch_header

__all__ = ["COORDINATOR_LANE", "MS_BUCKETS", "QUERY_OUTCOMES", "SCRAPE_PAGE", "SCRAPE_TIMEOUT", "STORAGE_LANE",
           "Metrics", "StateCollector", "api_name"]

QUERY_OUTCOMES = ("ok", "refused", "cancelled", "failed")
SCRAPE_TIMEOUT = 10.0
"""Seconds a scrape waits for the lanes."""
SCRAPE_PAGE = 256
"""Partitions one storage-thread call of a scrape reads at most."""
STORAGE_LANE = "storage"
COORDINATOR_LANE = "coordinator"
"""The ``lane`` label of the storage thread: the lane whose calls and queue the ``walgate_storage_*`` names (from
before the lanes, which dashboards chart) also count."""
MS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
              30000.0)
"""Upper bounds (ms) of the request-time histograms."""
_SECONDS_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0)
_PRODUCE, _FETCH = 0, 1
_TIMES = {  # histogram suffix -> what it measures (Kafka's RequestMetrics names)
    "requestqueuetimems": "from the request's last byte read until its handler starts (ms)",
    "localtimems": "in the handler: decode, the work (a long-poll Fetch's wait included), encode (ms)",
    "responsesendtimems": "writing the response to the socket (ms)",
    "totaltimems": "from the request's last byte read until its response is written (ms)",
}


@dataclass(frozen=True)
class _State:
    """Everything the collector asked the storage thread for, over a scrape's calls."""

    partitions: list[PartitionStats]
    committed: list[tuple[str, str, int, int]]  # (group, topic, partition, offset)
    groups: list[GroupStats]
    topic_ids: dict[uuid.UUID, str]
    cache: tuple[int, int, int]  # the batch cache's hits, misses, bytes
    tag_cache: tuple[int, int, int]  # the tag table cache's hits, misses, bytes
    queued: dict[str, int]  # lane -> calls waiting for it
    syncs: SyncLatency  # the engine's fsync times (thread-safe recorders, read when rendered)
    shares: list[ShareGroupStats]


@dataclass
class _Api:
    """The metric children of one (api key, version), looked up once."""

    name: str
    requests: Any
    times: tuple[Any, Any, Any, Any]  # request queue, local, response send, total


class Metrics:
    """Every metric of one gateway, in its own registry; :meth:`track` adds the state collector once serving."""

    def __init__(self) -> None:
        disable_created_metrics()  # no *_created series: they are Prometheus client noise Kafka dashboards lack
        self.registry = CollectorRegistry()
        r = self.registry
        self._requests = Counter("kafka_network_requestmetrics_requests", "Requests answered, by API and version",
                                 ["request", "version"], registry=r)
        self._errors = Counter("kafka_network_requestmetrics_errors",
                               "Error codes in responses (NONE included), by API and error, as Kafka's ErrorsPerSec",
                               ["request", "error"], registry=r)
        self._times = [Histogram(f"kafka_network_requestmetrics_{name}", f"Time {what}", ["request"],
                                 buckets=MS_BUCKETS, registry=r) for name, what in _TIMES.items()]
        self._connections = Gauge("kafka_server_socket_server_metrics_connection_count", "Open Kafka connections",
                                  ["listener"], registry=r)
        self._opened = Counter("kafka_server_socket_server_metrics_connection_creation",
                               "Kafka connections accepted", ["listener"], registry=r)
        self._closed = Counter("kafka_server_socket_server_metrics_connection_close", "Kafka connections closed",
                               ["listener"], registry=r)
        GCCollector(registry=r)  # python_gc_*: the collector's passes by generation (walgate.gateway.gc_policy)
        Gauge("walgate_gc_frozen_objects", "Objects the garbage collector no longer traverses (those of the node's "
              "start, frozen once it was ready: walgate.gateway.gc_policy)", registry=r).set_function(gc.get_freeze_count)
        self._lane_wait = Histogram("walgate_lane_call_queue_seconds", "Time a lane's call waited for its thread",
                                    ["lane"], buckets=_SECONDS_BUCKETS, registry=r)
        self._lane_run = Histogram("walgate_lane_call_seconds", "Time a lane's call ran", ["lane"],
                                   buckets=_SECONDS_BUCKETS, registry=r)
        r.register(_StorageLaneAliases({"walgate_storage_call_queue_seconds": self._lane_wait,
                                        "walgate_storage_call_seconds": self._lane_run}))
        self._queries = Histogram("walgate_sql_query_seconds", "Time a SELECT took in the query workers (queued and "
                                  "running), by outcome: ok, refused (its own error), cancelled, failed (a bug)", ["outcome"],
                                  buckets=_SECONDS_BUCKETS, registry=r)
        self._running = Gauge("walgate_sql_queries_in_workers", "SELECTs in the query workers (running or queued)",
                              registry=r)
        for outcome in QUERY_OUTCOMES:
            self._queries.labels(outcome)
        self._apis: dict[tuple[int, int], _Api] = {}
        self._error_children: dict[tuple[str, int], Any] = {}
        # per-topic traffic by topic key (name, or id for Fetch v13+): [bytes in, records in, bytes out]
        self.traffic: dict[str | uuid.UUID, list[int]] = {}

    def track(self, lanes: Mapping[str, StorageThread], engine: Engine, groups: GroupCoordinator,
              shares: ShareStats | None = None) -> None:
        """Report the state of ``engine`` (its partitions and batch cache), ``groups``, the share groups
        (``shares()``, on the coordinator lane) and the queue of each of ``lanes`` (by ``lane`` label; the storage
        thread's is :data:`STORAGE_LANE`) at every scrape (call once, on the event loop)."""
        self.registry.register(StateCollector(self, lanes, engine, groups, asyncio.get_running_loop(), shares))

    def render(self) -> bytes:
        """The Prometheus text exposition (blocks on the storage thread: not on the event loop)."""
        return generate_latest(self.registry)

    # ----------------------------------------------------------------- events

    def listener(self, name: str) -> None:
        """Listener ``name`` serves: its connection series exist (at 0) from now on, as Kafka's do."""
        for family in (self._opened, self._connections, self._closed):
            family.labels(name)

    def connection(self, listener: str, opened: bool) -> None:
        """A Kafka connection was accepted (``opened``) or closed on ``listener`` (its name: Kafka's label)."""
        if opened:
            self._opened.labels(listener).inc()
            self._connections.labels(listener).inc()
        else:
            self._closed.labels(listener).inc()
            self._connections.labels(listener).dec()

    def query(self, seconds: float | None, outcome: str = "") -> None:
        """A SELECT entered the query workers (``seconds`` None), or left them after ``seconds`` with ``outcome``
        (one of :data:`QUERY_OUTCOMES`)."""
        if seconds is None:
            self._running.inc()
        else:
            self._running.dec()
            self._queries.labels(outcome).observe(seconds)

    def lane_calls(self, lane: str) -> Callable[[float, float], None]:
        """The ``on_call`` of the lane labelled ``lane`` (:class:`StorageThread`): each of its calls ran for ``ran``
        seconds after ``waited`` in its queue (called on the lane's thread). The storage lane's series are also
        exposed under the ``walgate_storage_call_*`` names (:class:`_StorageLaneAliases`)."""
        wait, run = self._lane_wait.labels(lane), self._lane_run.labels(lane)

        def observe(waited: float, ran: float) -> None:
            wait.observe(waited)
            run.observe(ran)
        return observe

    def request(self, header: RequestHeader, request: Any, fields: Mapping[str, Any] | None,
                received: float, started: float, handled: float, sent: float, answered: bool = True) -> None:
        """A request was handled: its times (``time.perf_counter()`` at its last byte read, handler start,
        handler end, response written), its error codes (when ``answered``: Produce with acks=0 is not), and its
        per-topic traffic (Produce, Fetch)."""
        api = self._apis.get((header.api_key, header.api_version))
        if api is None:
            api = self._api(header.api_key, header.api_version)
        api.requests.inc()
        queue, local, send, total = api.times
        queue.observe((started - received) * 1000)
        local.observe((handled - started) * 1000)
        send.observe((sent - handled) * 1000)
        total.observe((sent - received) * 1000)
        if fields is not None and answered:
            counts: dict[int, int] = {}
            _error_codes(fields, counts)
            for code, n in counts.items():
                self._error(api.name, int(code)).inc(n)
        if header.api_key == _PRODUCE and fields is not None:
            self._produced(request, fields)
        elif header.api_key == _FETCH and fields is not None:
            self._fetched(fields, header.api_version)

    def _api(self, api_key: int, version: int) -> _Api:
        name = api_name(api_key)
        api = _Api(name, self._requests.labels(name, str(version)),
                   (self._times[0].labels(name), self._times[1].labels(name), self._times[2].labels(name),
                    self._times[3].labels(name)))
        self._apis[(api_key, version)] = api
        return api

    def _error(self, api: str, code: int) -> Any:
        child = self._error_children.get((api, code))
        if child is None:
            try:
                name = ErrorCode(code).name.upper()
            except ValueError:
                name = str(code)
            child = self._error_children[(api, code)] = self._errors.labels(api, name)
        return child

    def _produced(self, request: Any, fields: Mapping[str, Any]) -> None:
        """Bytes and records appended per topic: the partitions answered without error, whatever the acks (an
        acks=0 request's fields are the answer it did not get), as Kafka counts appends. Only those partitions'
        records are walked: they passed validation, so their batch headers hold."""
        for t, answer in zip(request.topic_data, fields["responses"]):
            for p, part in zip(t.partition_data, answer["partition_responses"]):
                if not p.records or part["error_code"] != ErrorCode.none:
                    continue
                counts = self.traffic.get(t.name)
                if counts is None:
                    counts = self.traffic[t.name] = [0, 0, 0]
                counts[0] += len(p.records)
                counts[1] += _record_count(p.records)

    def _fetched(self, fields: Mapping[str, Any], version: int) -> None:
        key = "topic" if version < 13 else "topic_id"
        for t in fields["responses"]:
            size = 0
            for p in t["partitions"]:
                records = p["records"]
                size += len(records) if isinstance(records, (bytes, bytearray, memoryview)) else sum(map(len, records))
            if size:
                counts = self.traffic.get(t[key])
                if counts is None:
                    counts = self.traffic[t[key]] = [0, 0, 0]
                counts[2] += size


@functools.cache
def api_name(api_key: int) -> str:
    """Kafka's name of an API (``Produce``, ``ApiVersions``, ...), as RequestMetrics labels it."""
    return str(request_class(api_key, WIRE_VERSIONS[api_key][0]).__name__.removesuffix("Request"))


def _error_codes(value: Any, counts: dict[int, int]) -> None:
    """Count every ``error_code`` field in a handler's response fields (dicts, and lists or tuples of them)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "error_code":
                counts[v] = counts.get(v, 0) + 1
            elif k != "records" and isinstance(v, (dict, list, tuple)):
                _error_codes(v, counts)
    else:
        for v in value:
            if isinstance(v, (dict, list, tuple)):
                _error_codes(v, counts)


def _record_count(records: bytes | bytearray | memoryview) -> int:
    """Records in a run of RecordBatch v2 (an accepted Produce partition: validated, magic 2 only)."""
    count, pos = 0, 0
    while pos + BATCH_HEADER_SIZE <= len(records):
        header = batch_header(records, pos)
        count += header.record_count
        pos += 12 + header.length
    return count


class _StorageLaneAliases(Collector):
    """The storage lane's call histograms under their names from before the lanes (``walgate_storage_call_*``, kept
    for dashboards): the ``lane="storage"`` samples of the lane histograms, renamed at scrape time, so a call is
    observed once."""

    def __init__(self, sources: Mapping[str, Histogram]) -> None:
        self._sources = sources  # alias name -> the lane histogram it shows

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        for name, source in self._sources.items():
            for family in source.collect():
                alias = Metric(name, family.documentation.replace("a lane's call", "a storage-thread call"), "histogram")
                for sample in family.samples:
                    if sample.labels.get("lane") == STORAGE_LANE:
                        alias.add_sample(name + sample.name.removeprefix(family.name),
                                         {k: v for k, v in sample.labels.items() if k != "lane"}, sample.value)
                yield alias


@dataclass(frozen=True)
class _Head:
    """A scrape's first storage-thread call: what is small or cheap to copy, and the partitions its pages walk."""

    partitions: list[tuple[str, int]]  # (topic, partition)
    topic_ids: dict[uuid.UUID, str]
    cache: tuple[int, int, int]  # the batch cache's hits, misses, bytes
    tag_cache: tuple[int, int, int]  # the tag table cache's hits, misses, bytes
    queued: dict[str, int]  # lane -> calls waiting for it


ShareStats = Callable[[], list[ShareGroupStats]]
"""The share groups' counts now (the share coordinator's ``stats``; coordinator lane)."""


def _head(engine: Engine, lanes: Mapping[str, StorageThread]) -> _Head:
    cache, tags = engine.batch_cache, engine.store.tag_cache
    return _Head(engine.partition_keys(), dict(engine.topics_by_id()), (cache.hits, cache.misses, cache.size),
                 (tags.hits, tags.misses, tags.size), {lane: thread.queued for lane, thread in lanes.items()})


def _coordinator_state(engine: Engine, groups: GroupCoordinator, shares: ShareStats | None
                       ) -> tuple[list[tuple[str, str, int, int]], list[GroupStats], list[ShareGroupStats]]:
    """The committed offsets (group, topic, partition, offset), the groups' and the share groups' counts: on the
    coordinator lane."""
    return ([(g, t, p, c.offset) for g, t, p, c in engine.all_committed()], list(groups.group_stats()),
            shares() if shares is not None else [])


async def _state(engine: Engine, groups: GroupCoordinator, lanes: Mapping[str, StorageThread],
                 shares: ShareStats | None, waiting: list[str]) -> _State:
    """The collector's lane calls: the head, then the partitions' stats :data:`SCRAPE_PAGE` at a time (storage
    thread), and the groups and committed offsets (the coordinator lane, asked from the event loop: a scrape never
    holds the storage thread while it waits for the coordinator lane). ``waiting[0]`` names the lane it waits for."""
    storage = lanes[STORAGE_LANE]
    waiting[0] = "the storage thread"
    head = await storage.call(_head, engine, lanes)
    waiting[0] = "the coordinator lane"
    committed, group_stats, share_stats = await lanes.get(COORDINATOR_LANE, storage).call(
        _coordinator_state, engine, groups, shares)
    waiting[0] = "the storage thread"
    partitions: list[PartitionStats] = []
    for start in range(0, len(head.partitions), SCRAPE_PAGE):
        partitions += await storage.call(engine.partitions.stats, head.partitions[start : start + SCRAPE_PAGE])
    return _State(partitions, committed, group_stats, head.topic_ids, head.cache, head.tag_cache, head.queued,
                  engine.syncs, share_stats)


class StateCollector(Collector):
    """Partitions, groups, lag, per-topic traffic, the batch cache, the lanes' queues and fsync latency, read at
    scrape time (a storage-thread call per page of partitions, see the module docstring)."""

    def __init__(self, metrics: Metrics, lanes: Mapping[str, StorageThread], engine: Engine, groups: GroupCoordinator,
                 loop: asyncio.AbstractEventLoop, shares: ShareStats | None = None) -> None:
        self._metrics = metrics
        self._shares = shares
        self._lanes = lanes
        self._engine = engine
        self._groups = groups
        self._loop = loop

    def describe(self) -> Iterable[Metric]:
        return ()  # nothing to check at registration (collect() would need the storage thread)

    def collect(self) -> Iterator[Metric]:
        waiting = ["the storage thread"]
        future = asyncio.run_coroutine_threadsafe(
            _state(self._engine, self._groups, self._lanes, self._shares, waiting), self._loop)
        try:
            state = future.result(SCRAPE_TIMEOUT)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"{waiting[0]} did not answer within {SCRAPE_TIMEOUT:.0f} s") from None
        yield from _partition_metrics(state)
        yield from _group_metrics(state)
        yield from _share_group_metrics(state)
        yield from _traffic_metrics(state, self._metrics.traffic)
        yield from _storage_metrics(state)


def _gauge(name: str, doc: str, labels: list[str], rows: Iterable[tuple[list[str], float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _counter(name: str, doc: str, labels: list[str], rows: Iterable[tuple[list[str], float]]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _partition_metrics(state: _State) -> Iterator[Metric]:
    parts = sorted(state.partitions, key=lambda s: (s.topic, s.partition))
    per_topic: dict[str, int] = {}
    for s in parts:
        per_topic[s.topic] = per_topic.get(s.topic, 0) + 1
    tp = ["topic", "partition"]
    yield _gauge("kafka_topic_partitions", "Partitions of the topic", ["topic"],
                 (([t], n) for t, n in per_topic.items()))
    yield _gauge("kafka_topic_partition_current_offset", "High watermark (the next offset to be written)", tp,
                 (([s.topic, str(s.partition)], s.high_watermark) for s in parts))
    yield _gauge("kafka_topic_partition_oldest_offset", "Log start offset (the oldest offset still readable)", tp,
                 (([s.topic, str(s.partition)], s.log_start) for s in parts))
    yield _gauge("kafka_log_log_size", "Bytes on disk of the partition's log", tp,
                 (([s.topic, str(s.partition)], s.size_bytes) for s in parts))
    yield _gauge("kafka_log_log_numlogsegments", "Segment files of the partition's log", tp,
                 (([s.topic, str(s.partition)], s.segments) for s in parts))


def _group_metrics(state: _State) -> Iterator[Metric]:
    groups = sorted(state.groups, key=lambda g: g.group)
    yield _gauge("kafka_coordinator_group_groupmetadatamanager_numgroups", "Consumer groups the coordinator knows", [],
                 [([], len(groups))])
    yield _gauge("kafka_coordinator_group_groupmetadatamanager_numoffsets", "Committed offsets stored", [],
                 [([], len(state.committed))])
    yield _gauge("kafka_consumergroup_members", "Members of the consumer group", ["consumergroup"],
                 (([g.group], g.members) for g in groups))
    yield _gauge("kafka_consumergroup_state", "1 for the group's current state (Kafka's state names)",
                 ["consumergroup", "protocol", "state"], (([g.group, g.protocol, g.state], 1) for g in groups))
    yield _counter("kafka_consumergroup_rebalances", "Rebalances of the consumer group", ["consumergroup"],
                   (([g.group], g.rebalances) for g in groups))
    ends = {(s.topic, s.partition): s.high_watermark for s in state.partitions}
    rows = sorted((g, t, p, offset, ends[(t, p)] - offset) for g, t, p, offset in state.committed if (t, p) in ends)
    labels = ["consumergroup", "topic", "partition"]
    yield _gauge("kafka_consumergroup_current_offset", "Committed offset of the group", labels,
                 (([g, t, str(p)], offset) for g, t, p, offset, _ in rows))
    yield _gauge("kafka_consumergroup_lag", "High watermark minus the committed offset", labels,
                 (([g, t, str(p)], lag) for g, t, p, _, lag in rows))
    sums: dict[tuple[str, str], list[int]] = {}
    for g, t, _, offset, lag in rows:
        total = sums.setdefault((g, t), [0, 0])
        total[0] += offset
        total[1] += lag
    yield _gauge("kafka_consumergroup_current_offset_sum", "Committed offsets of the group summed over the topic",
                 ["consumergroup", "topic"], (([g, t], v[0]) for (g, t), v in sums.items()))
    yield _gauge("kafka_consumergroup_lag_sum", "Lag of the group summed over the topic", ["consumergroup", "topic"],
                 (([g, t], v[1]) for (g, t), v in sums.items()))


def _share_group_metrics(state: _State) -> Iterator[Metric]:
    rows = [([g.group], g) for g in state.shares]
    yield _gauge("walgate_sharegroup_members", "Members of the share group", ["sharegroup"],
                 ((k, g.members) for k, g in rows))
    yield _gauge("walgate_sharegroup_partitions", "Share-partitions of the share group in memory", ["sharegroup"],
                 ((k, g.partitions) for k, g in rows))
    yield _gauge("walgate_sharegroup_records_in_flight",
                 "Records between the share-partitions' start and end offsets (not yet all acknowledged or archived)",
                 ["sharegroup"], ((k, g.in_flight) for k, g in rows))
    yield _gauge("walgate_sharegroup_records_acquired", "Records acquired by a member now (locked)", ["sharegroup"],
                 ((k, g.acquired) for k, g in rows))
    yield _counter("walgate_sharegroup_records_archived", "Records archived (rejected, or past the delivery limit)",
                   ["sharegroup"], ((k, g.archived) for k, g in rows))
    yield _counter("walgate_sharegroup_redeliveries", "Acquisitions of a record delivered before", ["sharegroup"],
                   ((k, g.redelivered) for k, g in rows))


def _traffic_metrics(state: _State, traffic: dict[str | uuid.UUID, list[int]]) -> Iterator[Metric]:
    """Per-topic traffic of the topics that exist (a topic id is named; a deleted topic's counts are not shown)."""
    topics = {s.topic for s in state.partitions}
    named: dict[str, list[int]] = {}
    for key, counts in list(traffic.items()):
        name = state.topic_ids.get(key) if isinstance(key, uuid.UUID) else key
        if name in topics:
            total = named.setdefault(name, [0, 0, 0])
            for i in range(3):
                total[i] += counts[i]
    rows = sorted(named.items())
    yield _counter("kafka_server_brokertopicmetrics_bytesin", "Record bytes appended by Produce", ["topic"],
                   (([t], c[0]) for t, c in rows))
    yield _counter("kafka_server_brokertopicmetrics_messagesin", "Records appended by Produce", ["topic"],
                   (([t], c[1]) for t, c in rows))
    yield _counter("kafka_server_brokertopicmetrics_bytesout", "Record bytes served by Fetch", ["topic"],
                   (([t], c[2]) for t, c in rows))


def _storage_metrics(state: _State) -> Iterator[Metric]:
    hits, misses, size = state.cache
    yield _counter("walgate_batch_cache_hits", "Fetches of a rendered batch found in the batch cache", [],
                   [([], hits)])
    yield _counter("walgate_batch_cache_misses", "Fetches of a batch rendered because the cache lacked it", [],
                   [([], misses)])
    yield _gauge("walgate_batch_cache_size_bytes", "Bytes of rendered batches in the cache", [], [([], size)])
    hits, misses, size = state.tag_cache
    yield _counter("walgate_tag_cache_hits", "SELECT preparations that found a supertable's tag table kept", [],
                   [([], hits)])
    yield _counter("walgate_tag_cache_misses", "SELECT preparations that built a supertable's tag table", [],
                   [([], misses)])
    yield _gauge("walgate_tag_cache_size_bytes", "Bytes of tag tables kept", [], [([], size)])
    yield _gauge("walgate_storage_queue_depth", "Calls waiting for the storage thread", [],
                 [([], state.queued[STORAGE_LANE])])
    yield _gauge("walgate_lane_queue_depth", "Calls waiting for the lane's thread", ["lane"],
                 (([lane], n) for lane, n in state.queued.items()))
    family = HistogramMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                   "Time of each fsync / fdatasync of the data dir (ms)", labels=["call"])
    for call, recorder in state.syncs.calls.items():
        family.add_metric([call], *_buckets(recorder))
    yield family


def _buckets(recorder: LatencyRecorder) -> tuple[list[tuple[str, float]], float]:
    """A recorder's counts as Prometheus cumulative buckets, and its sum."""
    counts, total = recorder.snapshot()
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip((*map(str, recorder.bounds), "+Inf"), counts):
        running += n
        buckets.append((bound, running))
    return buckets, total
