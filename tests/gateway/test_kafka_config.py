"""Configuration in Kafka's terms: server.properties parsing, --override, listeners, ssl.principal.mapping.rules and
protected mode (all in process; no server is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from walgate.gateway.cli import main, protected_mode_refusal
from walgate.gateway.config import Config, ConfigError, load_config
from walgate.gateway.listeners import ListenerError, is_loopback, parse_listeners, parse_protocol_map
from walgate.gateway.principal_mapping import MappingRuleError, NoMatchingRule, PrincipalMapper
from walgate.gateway.properties import PropertiesError, looks_like_properties, parse_properties

DEFAULT_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"

# ----------------------------------------------------------------------------------------- properties syntax


def test_properties_syntax_follows_java_properties_load() -> None:
    text = (
        "# comment\n"
        "   ! another comment\n"
        "\n"
        "a=1\n"
        "b : two words  \n"
        "c\tthree\n"
        "d.e=x\\\n"
        "     y\\\n"
        "  z\n"
        "key\\=with\\:seps=v\\tw\\u00e9\\\\\n"
        "empty=\n"
        "a=again\n"
        "pem=-----BEGIN CERTIFICATE-----\\n\\\n"
        "  MIIB\\n\\\n"
        "  -----END CERTIFICATE-----\n"
        "odd=ends with two backslashes \\\\\n"
        "next=1\n"
    )
    assert parse_properties(text) == {
        "a": "again",
        "b": "two words  ",
        "c": "three",
        "d.e": "xyz",
        "key=with:seps": "v\twé\\",
        "empty": "",
        "pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        "odd": "ends with two backslashes \\",
        "next": "1",
    }


def test_a_malformed_unicode_escape_names_its_line() -> None:
    with pytest.raises(PropertiesError, match="line 2"):
        parse_properties("a=1\nb=\\u12G4\n")


@pytest.mark.parametrize(("text", "properties"), [
    ("log.dirs=/data\n", True),
    ("# kafka\nnode.id: 1\n", True),
    ('data_dir = "/data"\n', False),
    ("[section]\nx=1\n", False),
    ("http_port = 6041\n", False),
    ("listeners=PLAINTEXT://:9092\n", True),
])
def test_format_is_recognised_by_content(text: str, properties: bool) -> None:
    assert looks_like_properties(text) is properties


# ------------------------------------------------------------------------------------ Kafka names -> Config

STOCK_KAFKA = """\
# Kafka 4's config/server.properties, shortened
process.roles=broker,controller
node.id=7
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://broker.example:19092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={data}
num.partitions=3
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
connections.max.idle.ms=120000
queued.max.request.bytes=-1
socket.listen.backlog.size=512
group.initial.rebalance.delay.ms=0
"""


def test_a_stock_kafka_server_properties_loads(tmp_path: Path) -> None:
    file = tmp_path / "server.properties"
    file.write_text(STOCK_KAFKA.format(data=tmp_path / "data"))
    ignored: list[str] = []
    config = load_config(file, env={}, ignored=ignored)
    assert (config.data_dir, config.node_id, config.max_request_bytes, config.connections_max_idle_ms,
            config.listen_backlog, config.group_initial_rebalance_delay_ms) == (
        tmp_path / "data", 7, 104857600, 120000, 512, 0)
    assert config.queued_max_request_bytes == 104857600  # Kafka's -1 (unbounded): walgate's default, >= the max
    assert config.auto_create_topic_partitions == 0  # num.partitions alone does not turn auto-creation on
    [listener] = config.kafka_listeners()  # the CONTROLLER listener is not opened
    assert (listener.name, listener.info.security_protocol, listener.host, listener.port) == (
        "PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
    assert config.advertised_addresses() == {"PLAINTEXT": ("broker.example", 19092)}
    assert any("num.io.threads accepted and not used" in line for line in ignored)
    assert any("process.roles" in line for line in ignored)


def test_unknown_settings_are_refused_and_name_the_key(tmp_path: Path) -> None:
    file = tmp_path / "server.properties"
    file.write_text("log.dirs=/d\nssl.clinet.auth=required\n")
    with pytest.raises(ConfigError, match="unknown setting 'ssl.clinet.auth'"):
        load_config(file, env={})


def test_auto_create_and_walgate_own_names(tmp_path: Path) -> None:
    file = tmp_path / "walgate.properties"
    file.write_text("log.dirs=/d\nauto.create.topics.enable=true\nnum.partitions=4\nhttp.port=7000\n"
                    "max.partitions=50\nlog.level=debug\n")
    config = load_config(file, env={})
    assert (config.auto_create_topic_partitions, config.http_port, config.max_partitions, config.log_level) == (
        4, 7000, 50, "DEBUG")


def test_precedence_file_env_override_flag(tmp_path: Path) -> None:
    file = tmp_path / "server.properties"
    file.write_text("log.dirs=/d\nnode.id=1\nconnections.max.idle.ms=1000\nsocket.listen.backlog.size=10\n"
                    "listen.backlog=11\n")
    env = {"WALGATE_NODE_ID": "2", "WALGATE_CONNECTIONS_MAX_IDLE_MS": "2000"}
    config = load_config(file, env=env, settings=[("connections.max.idle.ms", "3000"), ("broker.id", "3")],
                         overrides={"node_id": 4})
    assert (config.node_id, config.connections_max_idle_ms, config.listen_backlog) == (4, 3000, 11)


def test_toml_keeps_working_and_takes_the_new_fields(tmp_path: Path) -> None:
    file = tmp_path / "walgate.toml"
    file.write_text('data_dir = "/d"\nlisteners = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"\n'
                    'ssl_keystore_location = "/k.pem"\nssl_client_auth = "REQUIRED"\nsuper_users = ["User:a"]\n'
                    '[listener_overrides.ssl]\nssl_client_auth = "requested"\n')
    config = load_config(file, env={})
    assert config.ssl_client_auth == "required" and config.super_users == ("User:a",)
    assert config.for_listener("SSL").ssl_client_auth == "requested"
    assert config.for_listener("PLAINTEXT") is config


def test_per_listener_settings_and_the_settings_of_other_modules(tmp_path: Path) -> None:
    file = tmp_path / "server.properties"
    file.write_text(
        "log.dirs=/d\n"
        "listeners=INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093\n"
        "listener.security.protocol.map=INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_SSL\n"
        "ssl.keystore.location=/k.pem\n"
        "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
        "listener.name.external.sasl.enabled.mechanisms=PLAIN,OAUTHBEARER\n"
        "listener.name.external.ssl.client.auth=requested\n"
        "listener.name.external.scram-sha-512.sasl.jaas.config=org.apache...ScramLoginModule required;\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "super.users=User:admin;User:root\n"
        "allow.everyone.if.no.acl.found=true\n"
        "connections.max.reauth.ms=3600000\n"
        "sasl.oauthbearer.jwks.endpoint.url=file:///etc/jwks.json\n"
        "sasl.oauthbearer.expected.audience=a,b\n"
        "ssl.key.password=hunter2\n"
        "listener.name.external.ssl.key.password=swordfish\n"
    )
    config = load_config(file, env={})
    assert [(listener.name, listener.info.security_protocol) for listener in config.kafka_listeners()] == [
        ("INTERNAL", "SASL_PLAINTEXT"), ("EXTERNAL", "SASL_SSL")]
    assert config.for_listener("INTERNAL").sasl_enabled_mechanisms == ("SCRAM-SHA-512",)
    external = config.for_listener("external")
    assert external.sasl_enabled_mechanisms == ("PLAIN", "OAUTHBEARER") and external.ssl_client_auth == "requested"
    assert config.for_listener("EXTERNAL") is external  # computed once
    assert config.authorizer_class_name.endswith("StandardAuthorizer")
    assert config.super_users == ("User:admin", "User:root") and config.allow_everyone_if_no_acl_found is True
    assert config.connections_max_reauth_ms == 3600000
    assert config.sasl_oauthbearer_jwks_endpoint_url == "file:///etc/jwks.json"
    assert config.sasl_oauthbearer_expected_audience == ("a", "b")
    assert config.ssl_key_password == "hunter2" and "hunter2" not in repr(config)
    assert external.ssl_key_password == "swordfish" and "swordfish" not in repr(config) + repr(external)


def test_each_tls_listener_may_have_its_own_certificate(tmp_path: Path) -> None:
    file = tmp_path / "server.properties"
    file.write_text("log.dirs=/d\nlisteners=INTERNAL://127.0.0.1:1,A://127.0.0.1:2,B://127.0.0.1:3\n"
                    "listener.security.protocol.map=INTERNAL:SASL_PLAINTEXT,A:SSL,B:SASL_SSL\n"
                    "listener.name.internal.sasl.enabled.mechanisms=PLAIN\n"
                    "listener.name.a.ssl.keystore.location=/a.pem\nlistener.name.b.ssl.keystore.location=/b.pem\n")
    config = load_config(file, env={})
    assert (config.for_listener("A").ssl_keystore_location, config.for_listener("B").ssl_keystore_location,
            config.for_listener("INTERNAL").ssl_keystore_location) == (Path("/a.pem"), Path("/b.pem"), None)
    file.write_text(file.read_text() + "listener.name.b.ssl.client.auth=sometimes\n")
    with pytest.raises(ConfigError, match="listener.name.b.ssl.client.auth|ssl_client_auth must be one of"):
        load_config(file, env={})


@pytest.mark.parametrize(("lines", "message"), [
    ("ssl.keystore.type=JKS", "ssl_keystore_type must be PEM"),
    ("ssl.keystore.password=x", "not used with PEM files"),
    ("ssl.cipher.suites=TLS_AES_128_GCM_SHA256", "ssl.cipher.suites is not supported"),
    ("ssl.enabled.protocols=TLSv1.1,TLSv1.2", "'TLSv1.1' is not supported"),
    ("ssl.client.auth=sometimes", "ssl_client_auth must be one of none, requested, required"),
    ("ssl.principal.mapping.rules=RULE:^CN=(.*)$/$1/X", "invalid ssl.principal.mapping.rules rule"),
    ("listeners=SSL://127.0.0.1:9093", "needs a certificate"),
    ("listeners=FOO://127.0.0.1:9093", "FOO is not in listener.security.protocol.map"),
    ("listeners=PLAINTEXT://127.0.0.1:9093,SSL://127.0.0.1:9093\nssl.keystore.location=/k", "two listeners on one port"),
    ("listeners=PLAINTEXT://127.0.0.1:9092\nadvertised.listeners=SSL://h:1", "SSL, which is not in listeners"),
    ("listeners=PLAINTEXT://:9092\nadvertised.listeners=PLAINTEXT://0.0.0.0:9092", "must name an address"),
    ("listener.name.nosuch.ssl.client.auth=required", "names no listener"),
    ("listener.name.plaintext.log.dirs=/x", "not a per-listener setting"),
    ("inter.broker.listener.name=OTHER", "is not in listeners"),
    ("log.dirs=/a,/b", "several directories"),
    ("super.users=admin", "not a principal"),
])
def test_bad_security_settings_are_refused_clearly(tmp_path: Path, lines: str, message: str) -> None:
    file = tmp_path / "server.properties"
    file.write_text(f"log.dirs=/d\n{lines}\n")
    with pytest.raises(ConfigError) as error:
        load_config(file, env={})
    assert message in str(error.value)


def test_override_must_be_name_equals_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--data-dir", str(tmp_path), "--override", "listeners"]) == 2
    assert "expected name=value" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------- listeners


def test_listeners_parse_with_kafka_defaults_ipv6_and_custom_names() -> None:
    listeners = parse_listeners("plaintext://127.0.0.1:9092, SASL_SSL://[::1]:9093,CLIENT://:0",
                                DEFAULT_MAP + ",CLIENT:SSL")
    assert [(lst.name, lst.info.security_protocol, lst.host, lst.port, lst.info.tls, lst.info.sasl)
            for lst in listeners] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092, False, False),
        ("SASL_SSL", "SASL_SSL", "::1", 9093, True, True),
        ("CLIENT", "SSL", "", 0, True, False),
    ]


@pytest.mark.parametrize(("listeners", "protocol_map", "message"), [
    ("PLAINTEXT:9092", DEFAULT_MAP, "is not NAME://host:port"),
    ("PLAINTEXT://h:9092,PLAINTEXT://h:9093", DEFAULT_MAP, "each listener name may be used once"),
    ("PLAINTEXT://h:70000", DEFAULT_MAP, "not in 0..65535"),
    ("A://h:1", "A:TLS", "is not NAME:PROTOCOL"),
    ("A://h:1", "A:SSL,a:SSL", "names A twice"),
])
def test_bad_listeners(listeners: str, protocol_map: str, message: str) -> None:
    with pytest.raises(ListenerError, match=message):
        parse_listeners(listeners, protocol_map)


def test_protocol_map_is_case_insensitive() -> None:
    assert parse_protocol_map("internal:sasl_ssl, ") == {"INTERNAL": "SASL_SSL"}


def test_without_listeners_the_host_and_port_flags_are_one_plaintext_listener() -> None:
    config = Config(data_dir=Path("/d"), host="10.1.2.3", kafka_port=9999, advertised_host="kafka.example")
    [listener] = config.kafka_listeners()
    assert (listener.name, listener.host, listener.port) == ("PLAINTEXT", "10.1.2.3", 9999)
    assert config.advertised_addresses() == {"PLAINTEXT": ("kafka.example", 9999)}


# ------------------------------------------------------------------------------------------- protected mode


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.1", "::1", "localhost"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "10.0.0.1", "kafka.example"])
def test_other_addresses(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(("settings", "insecure"), [
    ({"host": "0.0.0.0"}, ["PLAINTEXT://0.0.0.0:9092", "HTTP://0.0.0.0:6041"]),
    ({"host": "0.0.0.0", "listeners": "SASL_PLAINTEXT://0.0.0.0:9092"}, []),  # SASL: HTTP Basic auth by default
    ({"host": "0.0.0.0", "listeners": "SASL_PLAINTEXT://0.0.0.0:9092", "http_auth": "none"}, ["HTTP://0.0.0.0:6041"]),
    ({"listeners": "SSL://0.0.0.0:9093", "ssl_keystore_location": "/k"}, ["SSL://0.0.0.0:9093"]),
    ({"listeners": "SSL://0.0.0.0:9093", "ssl_keystore_location": "/k", "ssl_client_auth": "required"}, []),
    ({"listeners": "SASL_PLAINTEXT://:9092,SASL_SSL://10.0.0.1:9093", "ssl_keystore_location": "/k"}, []),  # (HTTP: 127.0.0.1)
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9093", "ssl_keystore_location": "/k"}, []),
    ({"listeners": "PLAINTEXT://:9092"}, ["PLAINTEXT://:9092"]),
    ({"listeners": "SSL://:9093", "ssl_keystore_location": "/k", "listener_overrides": {
        "SSL": {"ssl_client_auth": "required"}}}, []),
])
def test_insecure_listeners(settings: dict[str, object], insecure: list[str]) -> None:
    assert Config(data_dir=Path("/d"), **settings).insecure_listeners() == insecure  # type: ignore[arg-type]


def test_ssl_client_auth_applies_to_sasl_ssl_only_when_set_per_listener() -> None:
    config = Config(data_dir=Path("/d"), listeners="SSL://:1,SASL_SSL://:2,B://:3", ssl_keystore_location=Path("/k"),
                    listener_security_protocol_map=DEFAULT_MAP + ",B:SASL_SSL", ssl_client_auth="required",
                    listener_overrides={"B": {"ssl_client_auth": "requested"}})
    assert [config.client_auth(listener) for listener in config.kafka_listeners()] == ["required", "none", "requested"]


def test_protected_mode_refuses_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--data-dir", str(tmp_path / "d"), "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to start: listener(s) PLAINTEXT://0.0.0.0:9092, HTTP://0.0.0.0:6041" in err and "--allow-insecure" in err
    assert not (tmp_path / "d").exists()  # refused before anything was opened
    assert main(["demo", "--host", "0.0.0.0", "--duration", "0.1"]) == 2
    assert "refusing to start" in capsys.readouterr().err
    allowed = Config(data_dir=tmp_path, host="0.0.0.0", allow_insecure=True)
    assert protected_mode_refusal(allowed) is None
    assert load_config(env={"WALGATE_DATA_DIR": "d", "WALGATE_ALLOW_INSECURE": "true"}).allow_insecure


# ------------------------------------------------------------------------------------ ssl.principal.mapping.rules


def test_mapping_rules_as_kafka_documents_them() -> None:
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
        "DEFAULT"
    )
    assert mapper.name("CN=kafka1,OU=ServiceUsers,O=Org,C=US") == "kafka1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US") == "duke@javasoft"
    assert mapper.name("CN=webadmin,OU=Admin,O=Org") == "WEBADMIN"
    assert mapper.name("O=Org") == "O=Org"  # DEFAULT: the DN itself


def test_mapping_rule_escapes_and_back_references() -> None:
    mapper = PrincipalMapper(r"RULE:^CN=([^,]*)\,x=(.*)$/$1\/$2$3$12/")
    assert mapper.name("CN=a,x=b") == "a/b$3a2"  # $3: no such group, literal; $12: group 1 then "2"


def test_without_default_an_unmatched_dn_has_no_principal() -> None:
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(.*),OU=ServiceUsers$/$1/").name("CN=x,OU=Other")


@pytest.mark.parametrize("rules", ["DEFAULTX", "RULE:^CN=(.*)$/$1/Lx", "RULE:(/x/", "NOTARULE"])
def test_invalid_mapping_rules(rules: str) -> None:
    with pytest.raises(MappingRuleError):
        PrincipalMapper(rules)


def test_the_log_cleaner_settings_use_kafkas_names(tmp_path: Path) -> None:
    config = load_config(None, env={}, settings=[("log.dirs", str(tmp_path)), ("log.cleaner.enable", "false"),
                                                 ("log.cleaner.backoff.ms", "250")])
    assert (config.log_cleaner_enable, config.log_cleaner_backoff_ms) == (False, 250)
    with pytest.raises(ConfigError):
        load_config(None, env={}, settings=[("log.dirs", str(tmp_path)), ("log.cleaner.backoff.ms", "0")])
    sized = load_config(None, env={}, settings=[("log.dirs", str(tmp_path)),
                                                ("log.cleaner.dedupe.buffer.size", "2400")])
    assert (config.log_cleaner_dedupe_buffer_size, sized.log_cleaner_dedupe_buffer_size) == (128 << 20, 2400)


@pytest.mark.parametrize(("inter_broker", "expected"), [(None, "INTERNAL"), ("external", "EXTERNAL")])
def test_cluster_nodes_reach_each_other_on_the_inter_broker_listener(tmp_path: Path, inter_broker: str | None,
                                                                     expected: str) -> None:
    """Kafka's ``inter.broker.listener.name`` (default: the first listener) names the listener a node's Kafka
    requests to the other nodes go to (kafka/node_links.py), whatever its security protocol."""
    from walgate.gateway.cluster_member import ClusterMember
    from walgate.gateway.server import Gateway

    config = Config(data_dir=tmp_path / "data", listeners="INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                    listener_security_protocol_map="INTERNAL:SASL_PLAINTEXT,EXTERNAL:PLAINTEXT",
                    inter_broker_listener_name=inter_broker)
    member = ClusterMember("127.0.0.1:1", "walgate", 1, tmp_path / "data", 2000)  # never asked: no etcd needed
    links = Gateway(config)._node_links(member)
    assert (links.listener, links.tls) == (expected, None)


def test_the_replica_selector_is_one_of_kafkas_or_refused_at_start(tmp_path: Path) -> None:
    file = tmp_path / "server.properties"
    rack_aware = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    file.write_text(f"log.dirs=/d\nbroker.rack=r2\nreplica.selector.class={rack_aware}\n")
    config = load_config(file, env={})
    assert (config.broker_rack, config.replica_selector_class) == ("r2", rack_aware)
    assert Config(data_dir=tmp_path).replica_selector_class is None  # Kafka's default: none
    file.write_text("log.dirs=/d\nreplica.selector.class=com.example.MySelector\n")
    with pytest.raises(ConfigError, match="replica_selector_class must be one of .*RackAwareReplicaSelector.*"
                                          "LeaderReplicaSelector .KIP-392., got 'com.example.MySelector'"):
        load_config(file, env={})
