"""Fuzzing the signature of requests between cluster nodes (walgate.security.node_token): any header text (missing,
empty, huge, non-ASCII, lone surrogates, negative or overflowing numbers, times far off the clock, signatures of the
wrong length or alphabet) and any request a signature may claim (another node's id, another method, path, query,
forwarded part, principal, host, time, body or catalog record; the same fields shifted).

Invariants, per input: :func:`header_refusal`, :func:`head_refusal` and :func:`refusal` answer a reason or None and
never raise; None from :func:`header_refusal` only for headers of the documented form (a time of 1 to 15 ASCII
digits within the window, 64 lowercase hex digits, ``User:<name>``, a sequence of 1 to 18 ASCII digits); a request
is accepted only with exactly the signature its own fields make with one of the tokens known, the head signature
likewise without the body. Seeded and bounded (tests/storage/fuzzing.py's settings; WALGATE_FUZZ_LONG=1: 20 times).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from walgate.security.node_token import (
    WINDOW_MS,
    Signed,
    head_refusal,
    head_signature,
    header_refusal,
    refusal,
    signature,
)

sys.path.insert(0, str(Path(__file__).parents[1] / "storage"))
from fuzzing import fuzz_settings  # noqa: E402

NOW = 1_800_000_000_000
TOKENS = ("k" * 43, "another-token-of-this-cluster-0123456789abc")
STRANGER = "a-token-of-no-node-of-this-cluster-0123456789"
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=80)  # lone surrogates included
NUMBERS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(
    [0, -1, NOW, NOW - WINDOW_MS, NOW + WINDOW_MS, NOW - WINDOW_MS - 1, NOW + WINDOW_MS + 1, 10**15 - 1, 10**15,
     10**18 - 1, 10**18, 2**63 - 1]), st.integers(NOW - 2 * WINDOW_MS, NOW + 2 * WINDOW_MS))
NUMBER_TEXT = st.one_of(NUMBERS.map(str), ANY_TEXT, st.sampled_from(
    ["", " 1", "1 ", "+1", "1_0", "٣", "²", "0x10", "1e3", "9" * 5000, "1" * 16, "1" * 19, "\x00", "NaN"]))
HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
SIGNATURE_TEXT = st.one_of(HEX, ANY_TEXT, st.text("0123456789abcdefABCDEF", min_size=60, max_size=68), st.sampled_from(
    ["", "0" * 64, "0" * 63, "0" * 65, "é" * 64, "０" * 64, "g" * 64, "0" * 10000]))
PRINCIPAL_TEXT = st.one_of(ANY_TEXT, ANY_TEXT.map(lambda t: "User:" + t), st.sampled_from(
    ["User:", "User:alice", "user:alice", "User:a\nb", "User:\x00", "Group:x", "User:" + "a" * 10000]))
_TIME, _SIGNATURE, _PRINCIPAL, _SEQ = (re.compile(p) for p in (
    r"[0-9]{1,15}", r"[0-9a-f]{64}", r"User:[^\x00-\x1f]+", r"[0-9]{1,18}"))
requests = st.builds(Signed, node=st.integers(-1, 2**31), method=st.sampled_from(["POST", "GET", "post", ""]) | ANY_TEXT,
                     path=st.sampled_from(["/rest/sql", "/rest/sql/f", "/influxdb/v1/write"]) | ANY_TEXT,
                     query=st.dictionaries(ANY_TEXT, ANY_TEXT, max_size=3), forwarded=ANY_TEXT,
                     principal=PRINCIPAL_TEXT, host=ANY_TEXT, time_ms=NUMBERS, body=st.binary(max_size=200),
                     catalog_seq=NUMBERS)


@fuzz_settings(400)
@given(NUMBER_TEXT, SIGNATURE_TEXT, PRINCIPAL_TEXT, NUMBER_TEXT)
@example("9" * 5000, "0" * 64, "User:a", "0").via("a time int() refuses")
@example(str(NOW), "é" * 64, "User:a", "0").via("a signature hmac.compare_digest refuses")
def test_headers_are_refused_with_a_reason_unless_of_a_nodes_form(time_text: str, given_text: str, principal: str,
                                                                   seq: str) -> None:
    why = header_refusal(time_text, given_text, principal, NOW, seq)
    formed = (_TIME.fullmatch(time_text) is not None and abs(NOW - int(time_text)) <= WINDOW_MS
              and _SIGNATURE.fullmatch(given_text) is not None and _PRINCIPAL.fullmatch(principal) is not None
              and _SEQ.fullmatch(seq) is not None)
    assert (why is None) == formed, why
    assert why is None or (isinstance(why, str) and why.startswith("its X-Walgate-"))


def _changed(signed: Signed, field: str, value: object) -> Signed:
    return dataclasses.replace(signed, **{field: value})


@fuzz_settings(400)
@given(requests, st.data())
def test_a_request_is_accepted_only_with_the_signature_its_own_fields_make(signed: Signed,
                                                                             data: st.DataObject) -> None:
    """The signature given is the request's own (with a token known, or a stranger's), one made for the same request
    with one field changed (another node, body, time ...), or any text; the head signature likewise."""
    token = data.draw(st.sampled_from([*TOKENS, STRANGER]))
    field = data.draw(st.sampled_from([f.name for f in dataclasses.fields(Signed)]))
    other = getattr(data.draw(requests), field)
    signed_for = data.draw(st.sampled_from(["itself", "changed"]))
    made = signed if signed_for == "itself" else _changed(signed, field, other)
    kind = data.draw(st.sampled_from(["made", "text"]))
    given_sig = signature(token, made) if kind == "made" else data.draw(SIGNATURE_TEXT)
    given_head = head_signature(token, made) if kind == "made" else data.draw(SIGNATURE_TEXT)
    why = refusal(TOKENS, given_sig, signed, NOW)
    why_head = head_refusal(TOKENS, given_head, signed, NOW)
    own = {signature(t, signed) for t in TOKENS}
    own_head = {head_signature(t, signed) for t in TOKENS}
    formed = header_refusal(str(signed.time_ms), "0" * 64, signed.principal, NOW, str(signed.catalog_seq)) is None
    assert (why is None) == (formed and given_sig in own), why
    assert (why_head is None) == (formed and given_head in own_head), why_head
    if made != signed:  # no two requests sign the same bytes (fields are length-prefixed)
        assert made.message() != signed.message(), field
        assert made.head_message() != signed.head_message() or field == "body", field
