"""Server configuration: one dataclass, three sources.

Precedence, lowest to highest (a later source overrides an earlier one, field by field):

1. the defaults below;
2. the file given with ``--config FILE``, in one of two formats:

   - TOML (a ``.toml`` file): top-level keys named like the fields, e.g. ``http_port = 6041``;
   - Kafka's ``server.properties`` (a ``.properties`` file; a file with neither suffix is recognised by its first
     setting, :func:`walgate.gateway.properties.looks_like_properties`): Kafka's broker setting names
     (``log.dirs``, ``node.id``, ``listeners``, ``ssl.keystore.location``, ...; :data:`KAFKA_ALIASES` lists those
     named differently from the field, every other field is its name with ``.`` for ``_``, e.g. ``http.port``),
     per-listener settings ``listener.name.<listener>.<setting>`` (:attr:`Config.listener_overrides`), and the
     Kafka settings walgate has no use for (:data:`KAFKA_IGNORED`), accepted with one log line each;

   unknown keys are an error in both (Kafka only warns; a misspelt security setting must not leave a listener
   open);
3. ``WALGATE_<FIELD>`` environment variables (e.g. ``WALGATE_HTTP_PORT=6041``);
4. ``--override name=value`` (repeatable; either kind of name, as ``kafka-server-start.sh --override``);
5. command-line flags (only those actually given).

``queued_max_request_bytes`` (Kafka's ``queued.max.request.bytes``, unbounded in Kafka) defaults to
:data:`QUEUED_MAX_REQUEST_BYTES` or ``max_request_bytes`` if larger, and may not be set below
``max_request_bytes`` (a request of the largest accepted size must fit).

Kafka listeners: with ``listeners`` unset there is one PLAINTEXT listener on ``host:kafka_port`` that advertises
``advertised_host`` / ``advertised_port`` (default ``host`` / ``kafka_port``: what the Kafka Metadata response
names, so a node behind NAT or in a container can announce a reachable address). With ``listeners`` set
(:mod:`.listeners`), those listeners replace it (``host`` then binds only the HTTP API) and ``advertised.listeners``
replaces the advertised address. Port 0 means "any free port" (the ``ready`` log line reports the port actually
bound). TLS settings are read on their own in :mod:`.tls`; :meth:`Config.for_listener` applies a listener's
overrides. Secrets (key passwords, inline keys) are left out of the dataclass's ``repr``.
"""

from __future__ import annotations

import copy
import os
import tomllib
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walgate.cluster.model import Keys, parse_endpoints, uses_tls
from walgate.gateway.http_origin import parse_origins
from walgate.gateway.jwks import jwks_path
from walgate.gateway.listeners import (
    DEFAULT_PROTOCOL_MAP,
    PLAINTEXT,
    Listener,
    ListenerError,
    is_loopback,
    parse_advertised,
    parse_listeners,
)
from walgate.gateway.logs import LOG_FORMATS
from walgate.gateway.principal_mapping import MappingRuleError, PrincipalMapper
from walgate.gateway.properties import PropertiesError, looks_like_properties, parse_properties
from walgate.replication.read_replica import REPLICA_SELECTORS
from walgate.security.authorizer import AUTHORIZER_CLASSES
from walgate.storage.producers import ProducerIds

__all__ = [
    "Config", "ConfigError", "load_config", "ENV_PREFIX", "QUEUED_MAX_REQUEST_BYTES", "KAFKA_ALIASES", "KAFKA_IGNORED",
    "SSL_CLIENT_AUTH", "TLS_PROTOCOLS", "kafka_settings",
]

ENV_PREFIX = "WALGATE_"
QUEUED_MAX_REQUEST_BYTES = 100 << 20
"""Default bound on the bytes of Kafka requests being read or handled, over all connections."""
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
SSL_CLIENT_AUTH = ("none", "requested", "required")
TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
"""The TLS versions walgate speaks (``ssl.enabled.protocols`` picks among them; older ones are refused)."""

KAFKA_ALIASES: dict[str, str] = {
    "log.dirs": "data_dir",  # one directory (walgate's data dir)
    "log.dir": "data_dir",
    "node.id": "node_id",
    "broker.id": "node_id",
    "socket.request.max.bytes": "max_request_bytes",
    "socket.listen.backlog.size": "listen_backlog",
}
"""Kafka setting -> Config field, where the field is not the setting with ``_`` for ``.``."""

KAFKA_IGNORED: dict[str, str] = {
    name: why
    for names, why in (
        (("process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers", "zookeeper.connect",
          "zookeeper.connection.timeout.ms", "security.inter.broker.protocol", "sasl.mechanism.inter.broker.protocol",
          "sasl.mechanism.controller.protocol", "metadata.log.dir"), "one node: no controller quorum or other brokers"),
        (("num.network.threads", "num.io.threads", "background.threads", "num.replica.fetchers",
          "num.recovery.threads.per.data.dir"), "walgate's threads are its own"),
        (("socket.send.buffer.bytes", "socket.receive.buffer.bytes"), "the kernel's buffer sizes are used"),
        (("transaction.state.log.replication.factor",
          "transaction.state.log.min.isr", "share.coordinator.state.topic.replication.factor",
          "share.coordinator.state.topic.min.isr"),
         "the transaction and share coordinators' state lives in __consumer_offsets with the groups' "
         "(offsets.topic.replication.factor)"),
        (("unclean.leader.election.enable",), "set per topic, or cluster-wide as a dynamic broker config"),
        (("log.retention.hours", "log.retention.minutes", "log.retention.ms", "log.retention.bytes",
          "log.segment.bytes", "log.retention.check.interval.ms", "log.flush.interval.messages",
          "log.flush.interval.ms", "log.cleanup.policy"),
         "retention and flushing are set per database and per topic, or at run time as dynamic broker configs"),
        (("message.max.bytes",), "batches are bounded by each topic's max.message.bytes and socket.request.max.bytes"),
        (("group.coordinator.rebalance.protocols",), "both group protocols are always on"),
        (("delete.topic.enable",), "topics can always be deleted"),
        (("ssl.protocol",), "ssl.enabled.protocols decides"),
        (("ssl.endpoint.identification.algorithm",), "a setting of the broker's own clients"),
        (("sasl.jaas.config",), "users live in walgate's user store"),
    )
    for name in names
}
"""Kafka settings a ``server.properties`` may carry that walgate accepts and does not use (name -> why)."""

_SASL_MECHANISMS = ("plain", "scram-sha-256", "scram-sha-512", "oauthbearer", "gssapi")
_LISTENER_PREFIX = "listener.name."
# Kafka settings that take a ``listener.name.<listener>.`` prefix, as Config fields
_PER_LISTENER = ("ssl_", "sasl_", "connections_max_reauth_ms")
_LIST_SEPARATOR = {"super_users": ";"}  # Kafka's LIST settings use ",", super.users ";"


class ConfigError(ValueError):
    """A configuration value is missing, unknown or malformed."""


@dataclass(frozen=True)
class Config:
    """Everything ``walgate serve`` needs; validated on construction."""

    data_dir: Path
    host: str = "127.0.0.1"
    kafka_port: int = 9092
    http_port: int = 6041
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    max_request_bytes: int = 16 << 20
    batch_cache_bytes: int = 256 << 20  # rendered Kafka record batches kept for re-reads
    connections_max_idle_ms: int = 600_000  # Kafka's connections.max.idle.ms: idle Kafka connections are closed
    # Kafka's queued.max.request.bytes: request bytes read or being handled, all connections together; a
    # connection whose next request does not fit stops reading until others finish (None: see module doc)
    queued_max_request_bytes: int | None = None
    request_read_timeout_ms: int = 30_000  # a Kafka request begun but not received in full by then: close
    listen_backlog: int = 4096  # Kafka's socket.listen.backlog.size; the kernel caps it at net.core.somaxconn
    max_partitions: int = 10_000  # partitions (vnodes) of all databases and topics together
    # the group coordinator's partitions (Kafka's __consumer_offsets) of a data dir made by this start; an existing
    # data dir keeps the number it was made with (walgate.storage.coordinator_partitions)
    offsets_topic_num_partitions: int = 1
    max_tables_per_database: int = 0  # tables (subtables and normal tables) one database may hold; 0: no limit
    # SQL SELECTs (walgate.gateway.query_workers): the worker processes that run them, the longest one may run
    # (0: no limit), the Arrow bytes of rows one may scan
    sql_workers: int = 2
    sql_timeout_ms: int = 0
    sql_max_bytes: int = 1 << 30
    # the bytes of answers the node holds in TMPDIR while they are sent, all queries together (None: 4 x
    # sql_max_bytes); a query finding them full, or whose answer would pass them, is refused (503, retriable)
    sql_answers_max_bytes: int | None = None
    # the log cleaner of compacted topics (Kafka's names): on/off, and the pause when no partition needs cleaning
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    # the keys one pass may map, as Kafka's (24 bytes a key at a load factor of 0.9): a longer dirty section is
    # cleaned in several passes
    log_cleaner_dedupe_buffer_size: int = 128 << 20
    # Consumer groups (Kafka's broker settings; TDengine's 2 s rebalance tick and 6 s - 30 min session range).
    group_initial_rebalance_delay_ms: int = 2_000
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_consumer_session_timeout_ms: int = 45_000  # KIP-848 members
    group_consumer_heartbeat_interval_ms: int = 5_000
    # Share groups (KIP-932; Kafka's broker settings): record lock, delivery limit, member heartbeat and session
    group_share_record_lock_duration_ms: int = 30_000
    group_share_delivery_count_limit: int = 5
    group_share_heartbeat_interval_ms: int = 5_000
    group_share_session_timeout_ms: int = 45_000
    group_share_partition_max_record_locks: int = 2_000
    # the bounds of the share groups' own share.record.lock.duration.ms and share.delivery.count.limit configs
    group_share_min_record_lock_duration_ms: int = 15_000
    group_share_max_record_lock_duration_ms: int = 60_000
    group_share_min_delivery_count_limit: int = 2
    group_share_max_delivery_count_limit: int = 10
    # Transactions (Kafka's broker settings): the longest transaction.timeout.ms a producer may ask for, how long an
    # idle transactional id is kept, and how often timed-out transactions are looked for
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # The finalized level of Kafka's transaction.version feature (a feature, not a broker config, in Kafka: set by
    # kafka-storage format / kafka-features; here a setting of the same name): 2 (KIP-890 part 2) as a new Kafka 4
    # cluster, 0 or 1 keep kafka-clients 4 on transaction version 1
    transaction_version: int = 2
    # Kafka's auto.create.topics.enable + num.partitions in one: 0 = off (the default)
    auto_create_topic_partitions: int = 0
    # origins (scheme://host[:port], comma-separated) whose browser pages may call the HTTP API; others get 403
    http_allowed_origins: str = ""
    log_level: str = "INFO"
    log_format: str = "text"  # or "json": one JSON object per line (walgate.gateway.logs)
    # Kafka listeners (module doc, docs/security.md); None: one PLAINTEXT listener on host:kafka_port
    listeners: str | None = None
    advertised_listeners: str | None = None
    listener_security_protocol_map: str = DEFAULT_PROTOCOL_MAP
    inter_broker_listener_name: str | None = None  # checked to name a listener; cluster nodes reach each other on it
    controller_listener_names: tuple[str, ...] = ()  # KRaft's controller listeners: in `listeners`, not opened
    # TLS with PEM files (Kafka's names; walgate.gateway.tls): SSL and SASL_SSL listeners, and HTTP if enabled
    ssl_keystore_type: str = "PEM"  # the only type walgate reads (Kafka's default is JKS)
    ssl_keystore_location: Path | None = None  # private key and certificate chain in one PEM file
    ssl_key_password: str | None = field(default=None, repr=False)  # of an encrypted private key
    ssl_keystore_certificate_chain: str | None = None  # inline PEM instead of a file (with ssl_keystore_key)
    ssl_keystore_key: str | None = field(default=None, repr=False)
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: Path | None = None  # CA certificates clients' certificates must chain to
    ssl_truststore_certificates: str | None = None  # inline PEM instead of a file
    ssl_client_auth: str = "none"  # none | requested | required (Kafka's)
    ssl_enabled_protocols: tuple[str, ...] = TLS_PROTOCOLS
    ssl_principal_mapping_rules: str = "DEFAULT"  # client certificate DN -> principal name (Kafka's syntax)
    http_ssl_enabled: bool = False  # the HTTP API speaks HTTPS with the ssl_* settings above
    allow_insecure: bool = False  # protected mode off: unauthenticated listeners on non-loopback addresses
    # Authentication and authorization (issue 16; carried here with Kafka's names for the modules that use them)
    sasl_enabled_mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    connections_max_reauth_ms: int = 0  # KIP-368: 0 = sessions never expire
    authorizer_class_name: str = ""  # any of Kafka's authorizer class names turns ACLs on
    super_users: tuple[str, ...] = ()  # "User:name" principals allowed everything (";"-separated in Kafka)
    allow_everyone_if_no_acl_found: bool = False
    sasl_oauthbearer_jwks_endpoint_url: str | None = None  # file:///path of the JWKS (None: no OAUTHBEARER)
    sasl_oauthbearer_expected_issuer: str | None = None
    sasl_oauthbearer_expected_audience: tuple[str, ...] = ()
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_scope_claim_name: str = "scope"
    sasl_oauthbearer_clock_skew_seconds: int = 30
    # listener.name.<listener>.<setting>: {LISTENER: {field: raw value}}, applied by for_listener(); not in repr
    # (a listener's ssl.key.password is one of them)
    listener_overrides: Mapping[str, Mapping[str, str]] = field(default_factory=dict, repr=False)
    # HTTP authentication: basic | none (None: basic when any Kafka listener uses SASL)
    http_auth: str | None = None
    # Cluster mode (docs/cluster.md): the etcd client endpoints (None: a single node, no etcd), the cluster's name
    # (its keys are under /walgate/<name>/ in etcd) and Kafka's broker.session.timeout.ms (the registration's lease:
    # a node not heard from for this long is no longer a member)
    cluster_etcd_endpoints: str | None = None
    cluster_name: str = "walgate"
    # How the node reaches that etcd (docs/cluster.md, "etcd over TLS and with a user"): over https:// endpoints,
    # the CA certificates etcd's must chain to (None: the system's trust store) and a client certificate and its
    # unencrypted key (PEM) for etcd's --client-cert-auth; an etcd user and its password (or a file holding it)
    cluster_etcd_ssl_cafile: Path | None = None
    cluster_etcd_ssl_certfile: Path | None = None
    cluster_etcd_ssl_keyfile: Path | None = None
    cluster_etcd_user: str | None = None
    cluster_etcd_password: str | None = field(default=None, repr=False)
    cluster_etcd_password_file: Path | None = None
    broker_session_timeout_ms: int = 9_000
    # Kafka's replica.lag.time.max.ms (issue 25): a follower not caught up for this long leaves the ISR; a leader
    # proposes ISR changes every half of it
    replica_lag_time_max_ms: int = 30_000
    # Kafka's default.replication.factor: the replicas of a topic CreateTopics makes with replication_factor -1
    # (topics Metadata creates have one); min.insync.replicas: the ISR an acks=all write needs, of a topic without
    # the config when the cluster has no dynamic default (read by the controller: give every node the same)
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    # Kafka's offsets.topic.replication.factor: the replicas of __consumer_offsets, whose partitions a replicated
    # cluster's group coordinators are (gateway/kafka/coordinator_replicas.py); it is made once enough nodes are live
    offsets_topic_replication_factor: int = 3
    # Kafka's preferred-leader rebalance (issue 26): the controller checks every leader.imbalance.check.interval.seconds
    # and moves leadership back to in-sync preferred replicas of each broker more than
    # leader.imbalance.per.broker.percentage % of whose preferred partitions another replica leads
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # a cluster's replicas (issue 25): SQL databases of REPLICA above 1 and Kafka topics of replication factor above 1
    # served, __consumer_offsets replicated (offsets.topic.replication.factor) and its leaders the group and
    # transaction coordinators; false: every vgroup and coordinator partition one copy (issue 24's cluster)
    replication_enable: bool = True
    # Kafka's broker.rack: this node's rack, registered with it (replica placement spreads racks; the rack-aware
    # replica selector matches a consumer's client.rack against it); None: no rack
    broker_rack: str | None = None
    # Kafka's replica.selector.class (KIP-392): which replica a consumer's Fetch (v11+) is told to read from
    # (preferred_read_replica); None: none, the leader always serves (Kafka's default); else one of
    # REPLICA_SELECTORS (walgate.replication.read_replica)
    replica_selector_class: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        object.__setattr__(self, "log_level", self.log_level.upper())
        if self.advertised_host is None:
            object.__setattr__(self, "advertised_host", self.host)
        if self.advertised_port is None:
            object.__setattr__(self, "advertised_port", self.kafka_port)
        queued = self.queued_max_request_bytes
        if queued is None:
            queued = max(QUEUED_MAX_REQUEST_BYTES, self.max_request_bytes)
            object.__setattr__(self, "queued_max_request_bytes", queued)
        for name in ("kafka_port", "http_port", "advertised_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise ConfigError(f"{name} must be in 0..65535, got {port}")
        if self.node_id < 0:
            raise ConfigError(f"node_id must be >= 0, got {self.node_id}")
        for name in ("max_request_bytes", "batch_cache_bytes", "connections_max_idle_ms", "request_read_timeout_ms",
                     "listen_backlog", "max_partitions", "offsets_topic_num_partitions", "log_cleaner_backoff_ms",
                     "log_cleaner_dedupe_buffer_size", "sql_workers", "sql_max_bytes", "replica_lag_time_max_ms",
                     "default_replication_factor", "min_insync_replicas", "offsets_topic_replication_factor",
                     "leader_imbalance_check_interval_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        answers = self.sql_answers_max_bytes
        if answers is None:
            answers = 4 * self.sql_max_bytes
            object.__setattr__(self, "sql_answers_max_bytes", answers)
        if answers < self.sql_max_bytes:
            raise ConfigError(f"sql_answers_max_bytes ({answers}) must be >= sql_max_bytes ({self.sql_max_bytes})")
        if self.leader_imbalance_per_broker_percentage < 0:
            raise ConfigError("leader_imbalance_per_broker_percentage must be >= 0, got "
                              f"{self.leader_imbalance_per_broker_percentage}")
        if self.max_tables_per_database < 0:
            raise ConfigError(f"max_tables_per_database must be >= 0 (0: no limit), got {self.max_tables_per_database}")
        if self.sql_timeout_ms < 0:
            raise ConfigError(f"sql_timeout_ms must be >= 0 (0: no limit), got {self.sql_timeout_ms}")
        if not 0 <= self.transaction_version <= 2:
            raise ConfigError(f"transaction_version must be 0, 1 or 2, got {self.transaction_version}")
        if queued < self.max_request_bytes:
            raise ConfigError(
                f"queued_max_request_bytes ({queued}) must be >= max_request_bytes "
                f"({self.max_request_bytes})"
            )
        if not 0 <= self.auto_create_topic_partitions <= 1024:
            raise ConfigError(f"auto_create_topic_partitions must be in 0..1024, got {self.auto_create_topic_partitions}")
        if self.group_initial_rebalance_delay_ms < 0:
            raise ConfigError(f"group_initial_rebalance_delay_ms must be >= 0, got {self.group_initial_rebalance_delay_ms}")
        if not 0 < self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise ConfigError(
                "need 0 < group_min_session_timeout_ms <= group_max_session_timeout_ms, got "
                f"{self.group_min_session_timeout_ms} and {self.group_max_session_timeout_ms}"
            )
        if not 0 < self.group_consumer_heartbeat_interval_ms < self.group_consumer_session_timeout_ms:
            raise ConfigError(
                "need 0 < group_consumer_heartbeat_interval_ms < group_consumer_session_timeout_ms, got "
                f"{self.group_consumer_heartbeat_interval_ms} and {self.group_consumer_session_timeout_ms}"
            )
        for name in ("transaction_max_timeout_ms", "transactional_id_expiration_ms",
                     "transaction_abort_timed_out_transaction_cleanup_interval_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        try:
            parse_origins(self.http_allowed_origins)
        except ValueError as e:
            raise ConfigError(f"http_allowed_origins: {e}") from None
        if self.sasl_oauthbearer_jwks_endpoint_url:
            try:
                jwks_path(self.sasl_oauthbearer_jwks_endpoint_url)
            except ValueError as e:
                raise ConfigError(f"sasl_oauthbearer_jwks_endpoint_url: {e}") from None
        if self.sasl_oauthbearer_clock_skew_seconds < 0:
            raise ConfigError(f"sasl_oauthbearer_clock_skew_seconds must be >= 0, got {self.sasl_oauthbearer_clock_skew_seconds}")
        if not (self.sasl_oauthbearer_sub_claim_name.strip() and self.sasl_oauthbearer_scope_claim_name.strip()):
            raise ConfigError("sasl_oauthbearer_sub_claim_name and sasl_oauthbearer_scope_claim_name must not be blank")
        if self.log_level not in _LOG_LEVELS:
            raise ConfigError(f"log_level must be one of {', '.join(_LOG_LEVELS)}, got {self.log_level!r}")
        if self.authorizer_class_name and self.authorizer_class_name not in AUTHORIZER_CLASSES:
            raise ConfigError(f"authorizer_class_name must be one of {', '.join(sorted(AUTHORIZER_CLASSES))}, "
                              f"got {self.authorizer_class_name!r}")
        if self.replica_selector_class and self.replica_selector_class not in REPLICA_SELECTORS:
            raise ConfigError(f"replica_selector_class must be one of {', '.join(REPLICA_SELECTORS)} (KIP-392), "
                              f"got {self.replica_selector_class!r}")
        self._check_cluster()
        if self.http_auth is None:
            sasl = any(listener.info.sasl for listener in self.kafka_listeners())
            object.__setattr__(self, "http_auth", "basic" if sasl else "none")
        if self.http_auth not in ("basic", "none"):
            raise ConfigError(f"http_auth must be basic or none, got {self.http_auth!r}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log_format must be one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}")
        self._check_security()
        self._check_listeners()

    def _check_cluster(self) -> None:
        if self.cluster_etcd_endpoints is not None:
            try:
                parse_endpoints(self.cluster_etcd_endpoints)
                tls = uses_tls(self.cluster_etcd_endpoints)
            except ValueError as e:
                raise ConfigError(f"cluster_etcd_endpoints: {e}") from None
            self._check_etcd_access(tls)
            if self.node_id >= ProducerIds.NODES:
                raise ConfigError(f"node_id must be below {ProducerIds.NODES} in a cluster (producer ids are spread "
                                  f"by it), got {self.node_id}")
        try:
            Keys(self.cluster_name)
        except ValueError as e:
            raise ConfigError(f"cluster_name: {e}") from None
        if self.broker_session_timeout_ms < 2000:
            raise ConfigError(f"broker_session_timeout_ms must be >= 2000 (an etcd lease of at least 2 s), got "
                              f"{self.broker_session_timeout_ms}")

    def _check_etcd_access(self, tls: bool) -> None:
        """The cluster.etcd.* settings go together and with the endpoints' scheme (raises :class:`ConfigError`)."""
        files = {"cluster_etcd_ssl_cafile": self.cluster_etcd_ssl_cafile,
                 "cluster_etcd_ssl_certfile": self.cluster_etcd_ssl_certfile,
                 "cluster_etcd_ssl_keyfile": self.cluster_etcd_ssl_keyfile}
        given = [name for name, path in files.items() if path is not None]
        if given and not tls:
            raise ConfigError(f"{', '.join(given)}: TLS settings for etcd need https:// etcd endpoints, got "
                              f"{self.cluster_etcd_endpoints}")
        if (self.cluster_etcd_ssl_certfile is None) != (self.cluster_etcd_ssl_keyfile is None):
            raise ConfigError("cluster_etcd_ssl_certfile and cluster_etcd_ssl_keyfile go together (a client "
                              "certificate and its private key)")
        if self.cluster_etcd_password is not None and self.cluster_etcd_password_file is not None:
            raise ConfigError("give either cluster_etcd_password or cluster_etcd_password_file")
        has_password = self.cluster_etcd_password is not None or self.cluster_etcd_password_file is not None
        if (self.cluster_etcd_user is not None) != has_password:
            raise ConfigError("cluster_etcd_user and its password (cluster_etcd_password or "
                              "cluster_etcd_password_file) go together")

    def _check_security(self) -> None:
        """The TLS and authentication values are valid (raises :class:`ConfigError`); a listener's view
        (:meth:`for_listener`) is checked with this too."""
        object.__setattr__(self, "ssl_client_auth", self.ssl_client_auth.lower())
        for name in ("ssl_keystore_type", "ssl_truststore_type"):
            object.__setattr__(self, name, getattr(self, name).upper())
            if getattr(self, name) != "PEM":
                raise ConfigError(f"{name} must be PEM (walgate reads PEM files only), got {getattr(self, name)!r}")
        if self.ssl_client_auth not in SSL_CLIENT_AUTH:
            raise ConfigError(f"ssl_client_auth must be one of {', '.join(SSL_CLIENT_AUTH)}, got {self.ssl_client_auth!r}")
        if not self.ssl_enabled_protocols:
            raise ConfigError("ssl_enabled_protocols must name at least one of " + ", ".join(TLS_PROTOCOLS))
        for protocol in self.ssl_enabled_protocols:
            if protocol not in TLS_PROTOCOLS:
                raise ConfigError(f"ssl_enabled_protocols: {protocol!r} is not supported (walgate speaks "
                                  f"{' and '.join(TLS_PROTOCOLS)}, nothing older)")
        if self.ssl_keystore_location is not None and (self.ssl_keystore_certificate_chain or self.ssl_keystore_key):
            raise ConfigError("give either ssl_keystore_location or ssl_keystore_certificate_chain + ssl_keystore_key")
        if bool(self.ssl_keystore_certificate_chain) != bool(self.ssl_keystore_key):
            raise ConfigError("ssl_keystore_certificate_chain and ssl_keystore_key go together")
        if self.ssl_truststore_location is not None and self.ssl_truststore_certificates:
            raise ConfigError("give either ssl_truststore_location or ssl_truststore_certificates")
        try:
            PrincipalMapper(self.ssl_principal_mapping_rules)
        except MappingRuleError as e:
            raise ConfigError(str(e)) from None
        for principal in self.super_users:
            if ":" not in principal:
                raise ConfigError(f"super_users: {principal!r} is not a principal (User:name)")
        if self.connections_max_reauth_ms < 0:
            raise ConfigError(f"connections_max_reauth_ms must be >= 0, got {self.connections_max_reauth_ms}")

    def _check_listeners(self) -> None:
        """The listener settings are consistent and every TLS listener has a certificate (its own or the global
        one) (raises :class:`ConfigError`)."""
        listeners = self.kafka_listeners()
        names = {listener.name for listener in listeners}
        for name in self.listener_overrides:
            if name not in names:
                raise ConfigError(f"listener.name.{name.lower()}.* names no listener (listeners: {', '.join(names)})")
            self.for_listener(name)  # its values are valid too
        if self.inter_broker_listener_name is not None and self.inter_broker_listener_name.upper() not in names:
            raise ConfigError(f"inter.broker.listener.name {self.inter_broker_listener_name} is not in listeners")
        try:
            self.advertised_addresses()
        except ListenerError as e:
            raise ConfigError(str(e)) from None
        for listener in listeners:
            tls = self.for_listener(listener.name)
            if listener.info.tls and not (tls.ssl_keystore_location or tls.ssl_keystore_certificate_chain):
                raise ConfigError(f"listener {listener.name} ({listener.info.security_protocol}) needs a certificate: "
                                  "set ssl.keystore.location (PEM: private key and certificate chain)")
            if listener.info.sasl and "OAUTHBEARER" in tls.sasl_enabled_mechanisms:
                self._check_oauthbearer(listener.name, tls.sasl_oauthbearer_jwks_endpoint_url)
        if self.http_ssl_enabled and not (self.ssl_keystore_location or self.ssl_keystore_certificate_chain):
            raise ConfigError("http_ssl_enabled needs a certificate: set ssl.keystore.location")

    @staticmethod
    def _check_oauthbearer(listener: str, jwks_url: str | None) -> None:
        """A SASL listener with OAUTHBEARER enabled has a JWKS (a ``file://`` URL) to verify tokens with."""
        if not jwks_url:
            raise ConfigError(f"listener {listener} enables SASL OAUTHBEARER but no JWKS verifies its tokens: "
                              "set sasl.oauthbearer.jwks.endpoint.url (a file:///path URL)")
        try:
            jwks_path(jwks_url)
        except ValueError as e:
            raise ConfigError(f"listener {listener}: sasl.oauthbearer.jwks.endpoint.url: {e}") from None

    def kafka_listeners(self) -> list[Listener]:
        """The Kafka listeners to open: ``listeners`` (without KRaft controller listeners), or one PLAINTEXT
        listener on ``host:kafka_port``."""
        if self.listeners is None:
            return [Listener(PLAINTEXT, self.host, self.kafka_port)]
        try:
            return parse_listeners(self.listeners, self.listener_security_protocol_map,
                                   skip=frozenset(name.upper() for name in self.controller_listener_names))
        except ListenerError as e:
            raise ConfigError(str(e)) from None

    def advertised_addresses(self) -> dict[str, tuple[str, int]]:
        """Listener name -> the (host, port) Kafka clients connected through it are told; a listener missing here
        advertises its bound address (port 0: the bound port)."""
        if self.listeners is None:
            assert self.advertised_host is not None and self.advertised_port is not None  # filled in above
            return {"PLAINTEXT": (self.advertised_host, self.advertised_port)}
        if self.advertised_listeners is None:
            return {}
        return parse_advertised(self.advertised_listeners, self.kafka_listeners())

    def for_listener(self, name: str) -> Config:
        """This config with listener ``name``'s ``listener.name.<name>.*`` overrides applied (ssl_*, sasl_*,
        connections_max_reauth_ms), as Kafka resolves a listener's settings; computed once per listener, so it
        is cheap to call per request (e.g. with a request context's ``listener.name``)."""
        overrides = self.listener_overrides.get(name.upper())
        if not overrides:
            return self
        cache: dict[str, Config] = self.__dict__.setdefault("_per_listener", {})
        if name.upper() not in cache:
            prefix = f"listener.name.{name.lower()}."
            view = copy.copy(self)  # not replace(): the listener checks are the whole config's, done once
            view.__dict__.pop("_per_listener")
            for key, raw in overrides.items():
                object.__setattr__(view, key, _coerce(key, raw, prefix + key.replace("_", ".")))
            object.__setattr__(view, "listener_overrides", {})
            view._check_security()
            cache[name.upper()] = view
        return cache[name.upper()]

    def client_auth(self, listener: Listener) -> str:
        """``ssl.client.auth`` in force on ``listener``: its own; but on a SASL_SSL listener only when set with the
        listener's prefix, else ``none`` (Kafka's rule, KIP-684: SASL authenticates those clients)."""
        if listener.info.sasl and "ssl_client_auth" not in self.listener_overrides.get(listener.name, {}):
            return "none"
        return self.for_listener(listener.name).ssl_client_auth

    def insecure_listeners(self) -> list[str]:
        """Listeners (``NAME://host:port``) that bind a non-loopback address and do not authenticate their clients:
        PLAINTEXT, or SSL without ``ssl.client.auth=required``, and the HTTP API without ``http_auth=basic``
        (protected mode refuses them)."""
        insecure = []
        for listener in self.kafka_listeners():
            info = listener.info
            authenticated = info.sasl or (info.tls and self.client_auth(listener) == "required")
            if not authenticated and not is_loopback(listener.host):
                insecure.append(f"{info.name}://{listener.host}:{listener.port}")
        if self.http_auth != "basic" and not is_loopback(self.host):
            insecure.append(f"HTTP://{self.host}:{self.http_port}")
        return insecure


def _field_types() -> tuple[dict[str, Any], set[str]]:
    """(field name -> the type a raw value is converted to (``X | None`` -> ``X``), the optional fields)."""
    types, optional = {}, set()
    for name, hint in typing.get_type_hints(Config).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        types[name] = args[0] if args and typing.get_origin(hint) is not tuple else hint
        if type(None) in typing.get_args(hint):
            optional.add(name)
    return types, optional


_FIELD_TYPES, _OPTIONAL = _field_types()
_SETTABLE = {name for name in _FIELD_TYPES if name != "listener_overrides"}
_BOOLS = {"true": True, "false": False}


def _coerce(name: str, value: Any, source: str) -> Any:
    """``value`` (a TOML value or a string from a properties file, the environment or the command line) as field
    ``name``'s type; an empty string is None for optional fields."""
    if isinstance(value, str) and not value.strip() and name in _OPTIONAL:
        return None
    return _convert(_FIELD_TYPES[name], name, value, source)


def _convert(kind: Any, name: str, value: Any, source: str) -> Any:
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{source}: {name} must be an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{source}: {name} must be an integer, got {value!r}") from None
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOLS:
            return _BOOLS[value.strip().lower()]
        raise ConfigError(f"{source}: {name} must be true or false, got {value!r}")
    if typing.get_origin(kind) is tuple:
        if isinstance(value, str):
            value = value.split(_LIST_SEPARATOR.get(name, ","))
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{source}: {name} must be a list of strings, got {value!r}")
        return tuple(v.strip() for v in value if v.strip())
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{source}: {name} must be a string, got {value!r}")
    return kind(value)


_WALGATE_ONLY = frozenset({
    "host", "kafka_port", "http_port", "advertised_host", "advertised_port", "batch_cache_bytes",
    "request_read_timeout_ms", "max_partitions", "max_tables_per_database", "auto_create_topic_partitions", "transaction_version",
    "http_allowed_origins", "log_level", "log_format", "http_ssl_enabled", "allow_insecure", "http_auth",
    "listener_overrides", "cluster_etcd_endpoints", "cluster_name", "cluster_etcd_ssl_cafile",
    "cluster_etcd_ssl_certfile", "cluster_etcd_ssl_keyfile", "cluster_etcd_user", "cluster_etcd_password",
    "cluster_etcd_password_file"})
"""Fields that are walgate's own, not a Kafka broker config (``auto_create_topic_partitions`` is Kafka's
``auto.create.topics.enable`` and ``num.partitions``, which the server describes itself)."""
_KAFKA_NAME = {field_name: kafka for kafka, field_name in KAFKA_ALIASES.items() if kafka not in ("log.dir", "broker.id")}


def _kafka_text(name: str, value: Any) -> str:
    """A field's value as Kafka writes it in ``server.properties``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return _LIST_SEPARATOR.get(name, ",").join(value)
    return str(value)


def kafka_settings(config: Config) -> dict[str, str]:
    """The Kafka broker configs ``config`` runs with, by their ``server.properties`` names, whatever source set them
    (a setting left at walgate's default is one walgate runs with too): every field that is a Kafka config (not
    :data:`_WALGATE_ONLY`; unset optional ones left out) and each listener's ``listener.name.<listener>.<config>``.
    Secrets are in it (``ssl.key.password``): whoever shows these must hide the sensitive ones."""
    settings = {_KAFKA_NAME.get(name, name.replace("_", ".")): _kafka_text(name, value)
                for name in _SETTABLE - _WALGATE_ONLY if (value := getattr(config, name)) is not None}
    for listener, overrides in config.listener_overrides.items():
        for name, raw in overrides.items():
            settings[f"{_LISTENER_PREFIX}{listener.lower()}.{name.replace('_', '.')}"] = raw
    return settings


def _from_toml(path: Path, text: str) -> dict[str, Any]:
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path}: {e}") from None
    unknown = sorted(set(table) - set(_FIELD_TYPES))
    if unknown:
        raise ConfigError(f"config file {path}: unknown key(s) {', '.join(unknown)}")
    values = {k: _coerce(k, v, str(path)) for k, v in table.items() if k != "listener_overrides"}
    if "listener_overrides" in table:
        values["listener_overrides"] = _toml_overrides(path, table["listener_overrides"])
    return values


def _toml_overrides(path: Path, table: Any) -> dict[str, dict[str, str]]:
    """``[listener_overrides.NAME]`` tables of ``field = value`` (per-listener fields only)."""
    result: dict[str, dict[str, str]] = {}
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: listener_overrides must be a table of tables")
    for listener, settings in table.items():
        if not isinstance(settings, dict):
            raise ConfigError(f"config file {path}: listener_overrides.{listener} must be a table")
        for key, value in settings.items():
            if key not in _SETTABLE or not key.startswith(_PER_LISTENER):
                raise ConfigError(f"config file {path}: {key} cannot be set per listener")
            if isinstance(value, list):
                value = ",".join(map(str, value))
            result.setdefault(listener.upper(), {})[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return result


def _from_properties(settings: Mapping[str, str], source: str, ignored: list[str]) -> dict[str, Any]:
    """Kafka-named settings (a ``server.properties`` or ``--override``s) -> field values; unknown names are an
    error, the ignored ones get a line in ``ignored`` (never their values: a JAAS config holds passwords)."""
    values: dict[str, Any] = {}
    overrides: dict[str, dict[str, str]] = {}
    auto_create: bool | None = None
    partitions = 1
    for name, value in settings.items():
        key, raw = name.strip(), value.strip()  # Kafka trims values too (ConfigDef)
        if key == "auto.create.topics.enable":
            auto_create = _convert(bool, key, raw, source)
            continue
        if key == "num.partitions":
            partitions = _convert(int, key, raw, source)
            continue
        if key in ("ssl.keystore.password", "ssl.truststore.password"):
            if raw:
                raise ConfigError(f"{source}: {key} is not used with PEM files (Kafka refuses it too); "
                                  "an encrypted private key takes ssl.key.password")
            continue
        if key == "ssl.cipher.suites":
            if raw:
                raise ConfigError(f"{source}: ssl.cipher.suites is not supported: walgate uses OpenSSL's default "
                                  "suites for the enabled protocols")
            continue
        if key.startswith(_LISTENER_PREFIX):
            listener, _, setting = key[len(_LISTENER_PREFIX):].partition(".")
            field_name = _field_of(setting)
            if listener and field_name is not None and field_name.startswith(_PER_LISTENER):
                overrides.setdefault(listener.upper(), {})[field_name] = raw
                continue
            mechanism, _, rest = setting.partition(".")
            oauthbearer = _field_of(rest) if mechanism == "oauthbearer" else None
            if listener and oauthbearer is not None and oauthbearer.startswith("sasl_oauthbearer_"):
                overrides.setdefault(listener.upper(), {})[oauthbearer] = raw  # Kafka's mechanism-prefixed form
                continue
            if listener and mechanism in _SASL_MECHANISMS and rest.startswith("sasl."):
                ignored.append(f"config {source}: {key} accepted and not used (users live in walgate's user store)")
                continue
            raise ConfigError(f"{source}: {key} is not a per-listener setting walgate knows "
                              "(listener.name.<listener>.ssl.*, .sasl.*, .connections.max.reauth.ms)")
        if key in KAFKA_IGNORED:
            ignored.append(f"config {source}: {key} accepted and not used ({KAFKA_IGNORED[key]})")
            continue
        field_name = _field_of(key)
        if field_name is None:
            raise ConfigError(f"{source}: unknown setting {key!r} (docs/security.md lists the Kafka settings walgate "
                              "reads; walgate's own are the TOML names with '.' for '_')")
        if field_name == "queued_max_request_bytes" and raw == "-1":  # Kafka's "unbounded": the default
            continue
        if field_name == "data_dir" and "," in raw:
            raise ConfigError(f"{source}: {key} names several directories; walgate keeps its data in one")
        values[field_name] = _coerce(field_name, raw, f"{source}: {key}")
    if auto_create is not None:
        values["auto_create_topic_partitions"] = partitions if auto_create else 0
    if overrides:
        values["listener_overrides"] = overrides
    return values


def _field_of(kafka_name: str) -> str | None:
    """The Config field a Kafka-style (dotted) setting name sets, or None."""
    name = KAFKA_ALIASES.get(kafka_name, kafka_name.replace(".", "_"))
    return name if name in _SETTABLE else None


def _from_file(path: Path, ignored: list[str]) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8: {e}") from None
    suffix = path.suffix.lower()
    if suffix == ".toml" or (suffix != ".properties" and not looks_like_properties(text)):
        return _from_toml(path, text)
    try:
        settings = parse_properties(text)
    except PropertiesError as e:
        raise ConfigError(f"config file {path}: {e}") from None
    return _from_properties(settings, str(path), ignored)


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values = {}
    for name in _SETTABLE:
        var = ENV_PREFIX + name.upper()
        if var in env:
            values[name] = _coerce(name, env[var], var)
    return values


def parse_override(text: str) -> tuple[str, str]:
    """``name=value`` of ``--override`` -> (name, value); raises :class:`ConfigError`."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--override {text!r}: expected name=value")
    return name.strip(), value


def load_config(
    file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    settings: Sequence[tuple[str, str]] = (),
    ignored: list[str] | None = None,
) -> Config:
    """Merge defaults, ``file``, ``env`` (default ``os.environ``), ``settings`` (``--override`` pairs: Kafka names
    or walgate's dotted ones) and ``overrides`` (CLI flags; ``None`` values are ignored) into a :class:`Config`.
    The Kafka settings accepted and not used are described in ``ignored`` (one line each, for the log).

    Raises :class:`ConfigError` for an unreadable file, an unknown key, a bad value, or when no source sets
    ``data_dir``.
    """
    values: dict[str, Any] = {}
    ignored = [] if ignored is None else ignored
    if file is not None:
        values.update(_from_file(file, ignored))
    values.update(_from_env(os.environ if env is None else env))
    if settings:
        from_cli = _from_properties(dict(settings), "--override", ignored)
        if "listener_overrides" in from_cli:
            merged = {k: dict(v) for k, v in values.get("listener_overrides", {}).items()}
            for listener, more in from_cli.pop("listener_overrides").items():
                merged.setdefault(listener, {}).update(more)
            values["listener_overrides"] = merged
        values.update(from_cli)
    values.update({k: _coerce(k, v, "command line") for k, v in (overrides or {}).items() if v is not None})
    if "data_dir" not in values:
        raise ConfigError(f"data_dir is required (--data-dir, {ENV_PREFIX}DATA_DIR, data_dir in a TOML file or "
                          "log.dirs in a properties file)")
    return Config(**values)
