"""The ACL model and the authorizer: matching, implications, deny wins, super users, allow.everyone, filters."""

from __future__ import annotations

import pytest

from walgate.gateway.config import ConfigError, load_config
from walgate.security.acl import (
    AclBinding,
    AclFilter,
    AclSet,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorized_bits,
    binding,
    validate,
)
from walgate.security.authorizer import Authorizer

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
Op, ALLOW, DENY = Operation, Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


class Store:
    def __init__(self, *bindings: AclBinding) -> None:
        self.current = AclSet(frozenset(bindings))


def acl(rtype: ResourceType, name: str, op: Operation, perm: Permission = ALLOW, principal: str = ALICE,
        host: str = "*", ptype: PatternType = LIT) -> AclBinding:
    return AclBinding(rtype, name, ptype, principal, host, op, perm)


def auth(*bindings: AclBinding, **kw: object) -> Authorizer:
    return Authorizer(Store(*bindings), **kw)  # type: ignore[arg-type]


def test_literal_prefixed_and_wildcard_patterns():
    a = auth(acl(T, "orders", Op.READ), acl(T, "logs.", Op.READ, ptype=PRE), acl(T, "*", Op.WRITE))
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, T, "orders")
    assert not a.authorize(ALICE, "10.0.0.1", Op.READ, T, "orders2")  # literal is exact
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, T, "logs.app")
    assert not a.authorize(ALICE, "10.0.0.1", Op.READ, T, "logs")  # prefix "logs." does not cover "logs"
    assert a.authorize(ALICE, "10.0.0.1", Op.WRITE, T, "anything")  # literal * covers every topic
    assert not a.authorize(ALICE, "10.0.0.1", Op.WRITE, G, "anything")  # ... of its type only
    assert not a.authorize(BOB, "10.0.0.1", Op.READ, T, "orders")


def test_principal_and_host_wildcards():
    a = auth(acl(T, "t", Op.READ, principal="User:*"), acl(T, "u", Op.READ, host="10.0.0.1"))
    assert a.authorize(BOB, "1.2.3.4", Op.READ, T, "t")
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, T, "u") and not a.authorize(ALICE, "10.0.0.2", Op.READ, T, "u")


def test_deny_wins_over_allow_whatever_the_pattern():
    a = auth(acl(T, "*", Op.ALL), acl(T, "secret", Op.READ, DENY, principal="User:*"))
    assert a.authorize(ALICE, "h", Op.WRITE, T, "secret")
    assert not a.authorize(ALICE, "h", Op.READ, T, "secret")
    assert a.authorize(ALICE, "h", Op.READ, T, "public")
    a = auth(acl(T, "s", Op.READ, ptype=PRE), acl(T, "s", Op.ALL, DENY, ptype=PRE, host="h"))
    assert not a.authorize(ALICE, "h", Op.READ, T, "s1") and a.authorize(ALICE, "other", Op.READ, T, "s1")


@pytest.mark.parametrize("implying", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL, Op.DESCRIBE])
def test_describe_is_implied_by_read_write_delete_alter(implying: Operation):
    assert auth(acl(T, "t", implying)).authorize(ALICE, "h", Op.DESCRIBE, T, "t")


def test_implications_are_one_way_and_only_for_allow():
    a = auth(acl(T, "t", Op.ALTER_CONFIGS), acl(T, "u", Op.DESCRIBE), acl(T, "v", Op.READ))
    assert a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, T, "t")
    assert not a.authorize(ALICE, "h", Op.ALTER_CONFIGS, T, "u") and not a.authorize(ALICE, "h", Op.READ, T, "u")
    assert not a.authorize(ALICE, "h", Op.WRITE, T, "v") and not a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, T, "v")
    # a DENY of READ does not deny DESCRIBE (Kafka: implications are for ALLOW only); a DENY of ALL does
    a = auth(acl(T, "t", Op.DESCRIBE), acl(T, "t", Op.READ, DENY))
    assert a.authorize(ALICE, "h", Op.DESCRIBE, T, "t") and not a.authorize(ALICE, "h", Op.READ, T, "t")
    assert not auth(acl(T, "t", Op.DESCRIBE), acl(T, "t", Op.ALL, DENY)).authorize(ALICE, "h", Op.DESCRIBE, T, "t")


def test_super_users_are_always_allowed():
    a = auth(acl(T, "*", Op.ALL, DENY, principal="User:*"), super_users=frozenset({"User:admin", "User:root"}))
    assert a.super_users == {"User:admin", "User:root"}
    assert a.authorize("User:admin", "h", Op.DELETE, T, "x") and not a.authorize(ALICE, "h", Op.DESCRIBE, T, "x")
    assert a.authorize_by_resource_type("User:root", "h", Op.WRITE, T)


def test_allow_everyone_only_for_resources_without_any_acl():
    a = auth(acl(T, "guarded", Op.READ, principal=BOB), allow_everyone_if_no_acl_found=True)
    assert a.authorize(ALICE, "h", Op.WRITE, T, "free")
    assert not a.authorize(ALICE, "h", Op.READ, T, "guarded")  # it has ACLs, none for alice
    assert not auth(acl(T, "guarded", Op.READ, principal=BOB)).authorize(ALICE, "h", Op.WRITE, T, "free")  # default


def test_a_change_of_the_acl_set_is_seen_by_the_next_check():
    store = Store()
    a = Authorizer(store)  # type: ignore[arg-type]
    assert not a.authorize(ALICE, "h", Op.READ, T, "t")
    store.current = AclSet(frozenset([acl(T, "t", Op.READ)]))
    assert a.authorize(ALICE, "h", Op.READ, T, "t")


def test_authorize_by_resource_type():
    assert auth(acl(T, "a", Op.WRITE)).authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    assert not auth(acl(T, "a", Op.WRITE)).authorize_by_resource_type(BOB, "h", Op.WRITE, T)
    assert not auth(acl(T, "a", Op.WRITE), acl(T, "*", Op.WRITE, DENY)).authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    assert not auth(acl(T, "ab", Op.WRITE, ptype=PRE), acl(T, "a", Op.WRITE, DENY, ptype=PRE)).authorize_by_resource_type(
        ALICE, "h", Op.WRITE, T)
    assert auth(acl(T, "a", Op.WRITE, DENY), acl(T, "b", Op.WRITE)).authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    assert auth(allow_everyone_if_no_acl_found=True).authorize_by_resource_type(ALICE, "h", Op.WRITE, T)


def test_authorized_operations_bits():
    a = auth(acl(T, "t", Op.READ), acl(T, "t", Op.ALTER_CONFIGS))
    ops = {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert a.authorized_operations(ALICE, "h", T, "t") == authorized_bits(ops) == sum(1 << op for op in ops)


def test_validate_refuses_what_kafka_refuses():
    validate(acl(C, "kafka-cluster", Op.ALTER))
    for bad in (acl(C, "other", Op.ALTER), acl(T, "", Op.READ), acl(T, "t", Op.ANY), acl(T, "t", Op.READ, Permission.ANY),
                acl(T, "t", Op.READ, principal="alice"), acl(T, "t", Op.READ, principal="User:"),
                acl(T, "t", Op.READ, ptype=PatternType.MATCH), acl(ResourceType.ANY, "t", Op.READ),
                binding(99, "t", 3, ALICE, "*", 3, 3), acl(T, "t", Op.READ, host="")):
        with pytest.raises(InvalidAcl):
            validate(bad)


def test_json_round_trip_and_refusal():
    b = acl(X, "tx-", Op.WRITE, DENY, ptype=PRE, host="10.1.1.1")
    assert AclBinding.from_json(b.to_json()) == b
    for raw in ([2, "t", 3, ALICE, "*", 3], [2, "t", 3, ALICE, "*", True, 3], [2, 5, 3, ALICE, "*", 3, 3],
                [2, "t", 3, ALICE, "*", 3, 9], "x", [4, "c", 3, ALICE, "*", 7, 3]):
        with pytest.raises(ValueError):
            AclBinding.from_json(raw)


def test_filters_as_kafka_acl_binding_filter():
    lit, star, pre, grp = (acl(T, "orders", Op.READ), acl(T, "*", Op.WRITE), acl(T, "ord", Op.READ, DENY, ptype=PRE),
                           acl(G, "orders", Op.READ, principal=BOB))
    s = AclSet(frozenset([lit, star, pre, grp]))

    def f(rtype: ResourceType = ResourceType.ANY, name: str | None = None, ptype: PatternType = PatternType.ANY,
          principal: str | None = None, op: Operation = Op.ANY, perm: Permission = Permission.ANY) -> set[AclBinding]:
        return set(s.matching(AclFilter(rtype, name, ptype, principal, None, op, perm)))

    assert f() == {lit, star, pre, grp}
    assert f(T) == {lit, star, pre}
    assert f(T, "orders") == {lit}  # ANY pattern type with a name: that exact name
    assert f(T, "orders", PatternType.MATCH) == {lit, star, pre}  # what applies to topic "orders"
    assert f(T, "ord", PatternType.PREFIXED) == {pre}
    assert f(T, None, PatternType.LITERAL) == {lit, star}
    assert f(principal=BOB) == {grp} and f(perm=DENY) == {pre} and f(op=Op.WRITE) == {star}
    assert AclFilter.from_wire(0, None, 1, None, None, 1, 1).unknown() and not AclFilter.from_wire(1, None, 1, None, None,
                                                                                                     1, 1).unknown()


def test_the_authorizer_settings_take_kafkas_class_names_and_booleans():
    cfg = load_config(env={"WALGATE_DATA_DIR": "/d", "WALGATE_AUTHORIZER_CLASS_NAME":
                           "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "WALGATE_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true", "WALGATE_SUPER_USERS": "User:a;User:b"})
    assert cfg.allow_everyone_if_no_acl_found is True and set(cfg.super_users) == {"User:a", "User:b"}
    assert load_config(env={"WALGATE_DATA_DIR": "/d"}).authorizer_class_name == ""  # no ACLs by default
    for bad in ({"WALGATE_AUTHORIZER_CLASS_NAME": "com.example.MyAuthorizer"},
                {"WALGATE_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "yes"}):
        with pytest.raises(ConfigError):
            load_config(env={"WALGATE_DATA_DIR": "/d", **bad})
