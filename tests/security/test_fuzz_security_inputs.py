"""Fuzzing the inputs issue 16 parses (seeded, bounded: CI's slice): a server.properties file, ssl.principal.mapping
rules and the DN they map, SASL PLAIN and SCRAM client messages, an OAUTHBEARER client message, a JWKS document, and
validly signed OAUTHBEARER tokens whose exp, iat and nbf are huge, negative, fractional, non-finite or no numbers.
Whatever the bytes, each parser answers or raises its own documented error, never anything else; a token it accepts
has an expiry and issue time in milliseconds that a 64-bit long holds."""

from __future__ import annotations

import json

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm

from walgate.gateway.principal_mapping import MappingRuleError, NoMatchingRule, PrincipalMapper
from walgate.gateway.properties import PropertiesError, parse_properties
from walgate.security.oauthbearer import Jwks, OAuthBearerError, TokenSettings, parse_initial_response, validate_token
from walgate.security.plain import PlainError, parse_plain
from walgate.security.scram import ScramCredential, ScramError, ScramExchange, credential_from_password

BOUNDED = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=200) | st.sampled_from(
    ["a=b\\", "k\\u12", "=x", "!c\na:b", "a b c\\\n  d", "\\uZZZZ=1"])
MESSAGE = st.binary(max_size=300) | st.sampled_from([
    b"n,,n=u,r=abc", b"n,a=x,n=u,r=a", b"p=tls,,n=u,r=a", b"y,,n=u=2C,r=a,m=x", b"n,,n=,r=", b"\0u\0p", b"a\0b\0c\0d",
    b"n,,\x01auth=Bearer x\x01\x01", b"n,a=u,\x01auth=Bearer a.b.c\x01k=v\x01\x01", b"c=biws,r=x,p=AAAA"])
CREDENTIAL: ScramCredential = credential_from_password("SCRAM-SHA-256", "pw", b"salt" * 4, 4096)
NOW_S = 1_800_000_000  # the validating clock, in seconds
LONG_MS = 2**63 - 1
TOKEN_KEY = ec.generate_private_key(ec.SECP256R1())
TOKEN_KEYS = Jwks.from_json(json.dumps({"keys": [{**json.loads(ECAlgorithm.to_jwk(TOKEN_KEY.public_key())),
                                                  "kid": "t", "use": "sig", "alg": "ES256"}]}))
DATES = st.one_of(
    st.sampled_from([1e20, 2**63, 2**63 - 1, 2**64, -(2**63), 10**400, 1e308, -1e308, float("inf"), float("-inf"),
                     float("nan"), LONG_MS // 1000, LONG_MS // 1000 + 1, -1, -0.5, 0, 0.5, 1.5]),
    st.integers(), st.floats(), st.integers(-10**6, 10**6).map(lambda d: NOW_S + d),
    st.none() | st.booleans() | st.text(max_size=8) | st.lists(st.integers(), max_size=2) | st.just({}))


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


@seed(22)
@BOUNDED
@given(st.fixed_dictionaries({}, optional={"exp": DATES, "iat": DATES, "nbf": DATES}))
@example({"exp": 1e20, "iat": NOW_S})
@example({"exp": 2**63, "iat": NOW_S})
@example({"exp": float("inf"), "iat": NOW_S})
@example({"exp": NOW_S + 60, "iat": float("nan")})
@example({"exp": LONG_MS // 1000, "iat": NOW_S})
def test_signed_tokens_with_any_numeric_dates_are_accepted_in_range_or_refused(dates: dict[str, object]) -> None:
    token = jwt.encode({"sub": "fuzz", **dates}, TOKEN_KEY, algorithm="ES256", headers={"kid": "t"})
    try:
        valid = validate_token(token, TOKEN_KEYS, TokenSettings(), NOW_S * 1000)
    except OAuthBearerError:
        return
    assert isinstance(valid.expiry_ms, int) and NOW_S * 1000 - 30_000 < valid.expiry_ms <= LONG_MS
    assert isinstance(valid.issued_at_ms, int) and 0 <= valid.issued_at_ms <= LONG_MS
