"""Every Kafka handler is typed at the protocol boundary (issue 23): its ``handle`` takes the API's request view and
returns the API's response ``TypedDict`` (:mod:`walgate.wire.messages`), so mypy checks every field a handler reads
from a request or answers; a handler typed ``Any`` there would let a misspelt or version-dependent field through."""

from __future__ import annotations

import typing

import pytest

from walgate.gateway.kafka.handlers import HANDLERS
from walgate.gateway.kafka.handlers.common import Deferred, Unanswered
from walgate.wire import messages


@pytest.mark.parametrize("api_key", sorted(HANDLERS))
def test_handle_takes_the_request_view_and_returns_the_response_type(api_key: int) -> None:
    fn = HANDLERS[api_key].fn
    hints = typing.get_type_hints(fn)
    view = messages.REQUESTS[api_key]
    response = getattr(messages, view.__name__.removesuffix("Request") + "Response")
    assert hints["request"] is view, f"{fn.__module__}.handle takes {hints['request']!r}, not {view.__name__}"
    returned = hints["return"]
    if typing.get_origin(returned) is Deferred:  # (Produce: the answer awaited after its appends)
        [returned] = typing.get_args(returned)
    answered = set(typing.get_args(returned)) or {returned}
    assert answered - {Unanswered} == {response}, f"{fn.__module__}.handle returns {hints['return']!r}"
