"""Fuzzing the inputs issue 16 parses (seeded, bounded: CI's slice): a server.properties file, ssl.principal.mapping
rules and the DN they map, SASL PLAIN and SCRAM client messages, an OAUTHBEARER client message and a JWKS document.
Whatever the bytes, each parser answers or raises its own documented error, never anything else."""

from __future__ import annotations

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from walgate.gateway.principal_mapping import MappingRuleError, NoMatchingRule, PrincipalMapper
from walgate.gateway.properties import PropertiesError, parse_properties
from walgate.security.oauthbearer import Jwks, OAuthBearerError, parse_initial_response
from walgate.security.plain import PlainError, parse_plain
from walgate.security.scram import ScramCredential, ScramError, ScramExchange, credential_from_password

BOUNDED = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=200) | st.sampled_from(
    ["a=b\\", "k\\u12", "=x", "!c\na:b", "a b c\\\n  d", "\\uZZZZ=1"])
MESSAGE = st.binary(max_size=300) | st.sampled_from([
    b"n,,n=u,r=abc", b"n,a=x,n=u,r=a", b"p=tls,,n=u,r=a", b"y,,n=u=2C,r=a,m=x", b"n,,n=,r=", b"\0u\0p", b"a\0b\0c\0d",
    b"n,,\x01auth=Bearer x\x01\x01", b"n,a=u,\x01auth=Bearer a.b.c\x01k=v\x01\x01", b"c=biws,r=x,p=AAAA"])
CREDENTIAL: ScramCredential = credential_from_password("SCRAM-SHA-256", "pw", b"salt" * 4, 4096)


@seed(16)
@BOUNDED
@given(TEXT)
def test_properties_parse_or_refuse(text: str) -> None:
    try:
        parsed = parse_properties(text)
    except PropertiesError:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in parsed.items())


@seed(16)
@BOUNDED
@given(TEXT, TEXT)
def test_principal_mapping_rules_parse_or_refuse(rules: str, dn: str) -> None:
    for candidate in (rules, f"RULE:{rules}/$1/L,DEFAULT", f"RULE:^CN=(.*?),{rules}$/$1/U"):
        try:
            mapper = PrincipalMapper(candidate)
        except MappingRuleError:
            continue
        try:
            assert isinstance(mapper.name(dn), str)
        except NoMatchingRule:
            pass


@seed(16)
@BOUNDED
@given(MESSAGE, MESSAGE)
def test_sasl_client_messages_are_answered_or_refused(first: bytes, final: bytes) -> None:
    try:
        parse_plain(first)
    except PlainError:
        pass
    exchange = ScramExchange("SCRAM-SHA-256")
    try:
        exchange.client_first(first)
        exchange.server_first(CREDENTIAL)
        exchange.client_final(final)
    except ScramError:
        pass
    try:
        parse_initial_response(first)
    except OAuthBearerError:
        pass


@seed(16)
@BOUNDED
@given(MESSAGE | st.sampled_from([b'{"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB"}]}', b'{"keys": 7}', b"[]"]))
def test_a_jwks_document_is_read_or_refused(document: bytes) -> None:
    try:
        Jwks.from_json(document)
    except ValueError:
        pass
