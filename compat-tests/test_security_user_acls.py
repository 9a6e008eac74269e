"""One permission store seen from both sides, with authenticated users (issue 16): a SASL_PLAINTEXT listener with an
authorizer; root (always a super user) makes user alice with SQL, gives her Write on a topic with the Kafka Admin
API (CreateAcls) and Read with TDengine's ``GRANT SUBSCRIBE``. confluent-kafka logged in as alice then produces
where the ACL allows and meets TOPIC_AUTHORIZATION_FAILED where it does not, reads in her group, and cannot see the
other topic; the Kafka Admin API lists the grant as an ACL and ``SHOW USER PRIVILEGES`` lists the ACL as a grant.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from sasl_node import ROOT_PASSWORD, SaslNode, serve

ALICE = ("alice", "alice-s3cret")


def login(bootstrap: str, user: str, password: str, **conf: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": password, **conf}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslNode]:
    settings = {"authorizer_class_name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    with serve(tmp_path_factory.mktemp("walgate-user-acls"), **settings) as node:
        server = node.server
        admin = AdminClient(login(node.bootstrap, "root", ROOT_PASSWORD))
        for name in ("open", "secret"):
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
        node.sql(f"CREATE USER {ALICE[0]} PASS '{ALICE[1]}'")
        bindings = [AclBinding(ResourceType.TOPIC, "open", ResourcePatternType.LITERAL, "User:alice", "*",
                               AclOperation.WRITE, AclPermissionType.ALLOW),
                    AclBinding(ResourceType.GROUP, "alices", ResourcePatternType.LITERAL, "User:alice", "*",
                               AclOperation.READ, AclPermissionType.ALLOW)]
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)
        node.sql("GRANT SUBSCRIBE ON open TO alice")
        yield node
        assert "Traceback" not in server.log() and ALICE[1] not in server.log()


def produce(bootstrap: str, topic: str) -> KafkaError | None:
    producer = Producer(login(bootstrap, *ALICE, **{"message.timeout.ms": "10000"}))
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"from alice", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    return outcome[0]


def test_confluent_kafka_as_alice_writes_where_an_acl_allows_and_nowhere_else(node: SaslNode):
    assert produce(node.bootstrap, "open") is None
    denied = produce(node.bootstrap, "secret")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_confluent_kafka_as_alice_reads_with_a_tdengine_grant_and_sees_only_her_topic(node: SaslNode):
    produce(node.bootstrap, "open")
    consumer = Consumer(login(node.bootstrap, *ALICE, **{"group.id": "alices", "auto.offset.reset": "earliest"}))
    try:
        assert sorted(consumer.list_topics(timeout=30).topics) == ["open"]  # secret: not Describe-able, hidden
        consumer.subscribe(["open"])
        got = None
        for _ in range(100):
            got = consumer.poll(0.3)
            if got is not None and got.error() is None:
                break
        assert got is not None and got.error() is None and got.value() == b"from alice"
    finally:
        consumer.close()


def test_confluent_kafka_admin_lists_a_grant_as_an_acl_and_sql_an_acl_as_a_grant(node: SaslNode):
    admin = AdminClient(login(node.bootstrap, "root", ROOT_PASSWORD))
    of_alice = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
                                AclPermissionType.ANY)
    listed = {(b.restype, b.name, b.operation) for b in admin.describe_acls(of_alice).result(timeout=30)}
    assert listed == {(ResourceType.TOPIC, "open", AclOperation.WRITE), (ResourceType.GROUP, "alices", AclOperation.READ),
                      (ResourceType.TOPIC, "open", AclOperation.READ)}  # the last one: GRANT SUBSCRIBE
    shown = node.sql("SHOW USER PRIVILEGES")
    names = [c[0] for c in shown["column_meta"]]
    rows = [dict(zip(names, row)) for row in shown["data"]]
    assert {(r["user_name"], r["privilege"]) for r in rows if r["user_name"] == "alice"} >= {("alice", "write"),
                                                                                          ("alice", "subscribe")}


def test_confluent_kafka_as_alice_may_not_administer(node: SaslNode):
    admin = AdminClient(login(node.bootstrap, *ALICE))
    futures = admin.create_acls([AclBinding(ResourceType.TOPIC, "secret", ResourcePatternType.LITERAL, "User:alice",
                                            "*", AclOperation.READ, AclPermissionType.ALLOW)])
    with pytest.raises(KafkaException) as refused:
        for future in futures.values():
            future.result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_a_user_changes_its_own_password_as_tdengine_allows_and_only_its_own(node: SaslNode):
    """TDengine's rule: every user may ``ALTER USER <self> PASS``, here through TDengine's REST client (taosrest) as
    bob, not a super user and with no ACL; the new password logs bob in to Kafka (confluent-kafka SCRAM-SHA-512), the
    old one no longer does. Another user's password stays for super users (403), and Kafka's own way,
    AlterUserScramCredentials, keeps Kafka's rule: Alter on the cluster, even for one's own credential."""
    taosrest = pytest.importorskip("taosrest", reason="taospy is not installed: pip install -e '.[test]'")
    node.sql("CREATE USER bob PASS 'bob-first'")
    bob = taosrest.RestClient(node.server.http_url, user="bob", password="bob-first")
    assert bob.sql("ALTER USER bob PASS 'bob-second'")["code"] == 0
    admin = AdminClient(login(node.bootstrap, "bob", "bob-second"))
    assert admin.list_topics(timeout=30).topics is not None  # logged in with the new password
    errors: list[KafkaError] = []
    old = AdminClient({**login(node.bootstrap, "bob", "bob-first"), "error_cb": errors.append})
    with pytest.raises(KafkaException):
        old.list_topics(timeout=10)
    old.poll(1)  # serves the error callback
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    bob = taosrest.RestClient(node.server.http_url, user="bob", password="bob-second")
    with pytest.raises(taosrest.HTTPError, match="403"):
        bob.sql(f"ALTER USER {ALICE[0]} PASS 'taken-over'")
    assert produce(node.bootstrap, "open") is None  # alice's password is unchanged
    upsert = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          b"bob-third")
    with pytest.raises(KafkaException) as refused:
        admin.alter_user_scram_credentials([upsert])["bob"].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, refused.value
