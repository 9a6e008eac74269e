"""Who sent a Kafka request travels in its RequestContext, passed to the handler (issue 23, "hidden inputs").

Handlers, the ACL checks, the audit log and the address a node is named by read the principal, client host and
listener from the context they are given, never from state of the task that runs them: two requests of different
principals served at the same time each get their own answer, and no module of the gateway keeps a ContextVar.
Each request is encoded, decoded and dispatched as the server does, against a real Engine on its storage thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime
import importlib
import logging
import pkgutil
from typing import Any

import pytest
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.metadata.v12 import request as metadata_v12

import walgate.gateway
from tests.gateway.test_handlers_hardening import Node, node  # noqa: F401 - the fixture
from walgate.gateway.kafka.context import ANONYMOUS, RequestContext
from walgate.gateway.kafka.handlers import HANDLERS
from walgate.gateway.kafka.handlers.common import Deferred
from walgate.gateway.listeners import ListenerInfo
from walgate.security.authorizer import Authorizer
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import build_response, decode_view, encode_request, encode_response, parse_request_header

ALICE, BOB = "User:alice", "User:bob"


async def call_as(node: Node, api_key: int, version: int, request: Any, **identity: Any) -> dict[str, Any]:  # noqa: F811
    """Dispatch ``request`` as the server does, as the connection ``identity`` (principal, peer, listener)."""
    frame = encode_request(api_key, version, 11, "context-test", request)[4:]
    header = parse_request_header(frame)
    ctx = RequestContext.of(header, **identity)
    assert (ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id) == (api_key, version, 11, "context-test")
    fields = await HANDLERS[api_key].fn(node.broker, ctx, decode_view(header, frame))
    if isinstance(fields, Deferred):  # Produce: the answer awaited after its appends
        fields = await fields.answer
    assert encode_response(header, build_response(api_key, version, fields))
    return fields


def _metadata(topic: str) -> Any:
    return metadata_v12.MetadataRequest(topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),),
                                        allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def _create(topic: str) -> Any:
    return create_topics_v7.CreateTopicsRequest(
        topics=(create_topics_v7.CreatableTopic(name=topic, num_partitions=1, replication_factor=1, assignments=(),
                                                configs=()),),
        timeout=datetime.timedelta(seconds=5), validate_only=False)


def test_a_request_context_is_immutable() -> None:
    ctx = RequestContext(principal=ALICE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.principal = BOB  # type: ignore[misc]
    assert RequestContext().principal == ANONYMOUS


async def test_requests_of_two_principals_at_once_are_each_authorized_as_their_own(node: Node) -> None:  # noqa: F811
    await call_as(node, 19, 7, _create("orders"))
    node.broker.authorizer = Authorizer(node.engine.catalog.acls, super_users=frozenset({ALICE}))  # bob: no ACL
    answers = await asyncio.gather(*(call_as(node, 3, 12, _metadata("orders"), principal=who, peer=f"10.0.0.{i}")
                                     for i, who in enumerate([ALICE, BOB, ALICE, BOB] * 4)))
    codes = [a["topics"][0]["error_code"] for a in answers]
    assert codes == [ErrorCode.none, ErrorCode.topic_authorization_failed] * 8


async def test_the_audit_line_names_the_contexts_principal_and_peer(node: Node,  # noqa: F811
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="walgate.audit")
    answer = await call_as(node, 19, 7, _create("audited"), principal=ALICE, peer="10.1.2.3")
    assert answer["topics"][0]["error_code"] == ErrorCode.none
    [line] = [r.getMessage() for r in caplog.records if r.name == "walgate.audit"]
    assert line.startswith("audit: User:alice from 10.1.2.3: CreateTopics topic audited: ok")


async def test_the_node_is_named_by_the_contexts_listener(node: Node) -> None:  # noqa: F811
    node.broker.advertised = {"INTERNAL": ("internal.example", 19092)}
    inside = await call_as(node, 3, 12, _metadata("x"), listener=ListenerInfo("INTERNAL", "PLAINTEXT"))
    outside = await call_as(node, 3, 12, _metadata("x"))
    assert [(b["host"], b["port"]) for b in inside["brokers"]] == [("internal.example", 19092)]
    assert [(b["host"], b["port"]) for b in outside["brokers"]] == [("127.0.0.1", 9092)]


def test_no_module_of_the_gateway_keeps_a_context_var() -> None:
    found = []
    for info in pkgutil.walk_packages(walgate.gateway.__path__, "walgate.gateway."):
        module = importlib.import_module(info.name)
        found += [f"{info.name}.{name}" for name, value in vars(module).items()
                  if isinstance(value, contextvars.ContextVar)]
    assert found == []
