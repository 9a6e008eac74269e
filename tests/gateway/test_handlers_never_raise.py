"""Every handler answers, whatever the engine or the coordinator raises (issue 13, "found by reading the code").

A handler that raises closes the client's connection with no answer, and the client retries until it times out.
Here every advertised (api key, version) gets random valid requests (hypothesis, from the schemas; seeded and
bounded) while every use of the engine and of the group coordinator raises an unexpected error: each request must
still be answered, with a response that encodes. Failures this broad cannot be produced with real input, so the
engine and the coordinator are told to fail; the handlers, the wire code and the storage thread are the real ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.wire.wire_helpers import instances
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.groups import GroupService
from walgate.gateway.kafka.handlers import HANDLERS, advertised
from walgate.gateway.kafka.handlers.common import Deferred, Unanswered
from walgate.gateway.kafka.wakeups import FetchWakeups
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.wire.protocol import (
    build_response,
    decode_view,
    encode_request,
    encode_response,
    parse_request_header,
    request_class,
)

VERSIONS = sorted({(key, v) for key, (lo, hi) in advertised().items() for v in {lo, hi}})


class Failing:
    """Any attribute read raises (attributes set go to the target)."""

    def __init__(self, target: Any, what: str) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_what", what)

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"{self._what}.{name} failed")

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)


class Rig:
    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.storage = StorageThread()
        self.wakeups = FetchWakeups(self.loop)
        self.engine = self.loop.run_until_complete(self.storage.call(Engine.open, data_dir, listener=self.wakeups))
        self.broker = self.loop.run_until_complete(self._broker())

    async def _broker(self) -> Broker:
        engine = Failing(self.engine, "engine")
        groups = GroupService(engine, self.storage)  # type: ignore[arg-type]
        groups.groups = Failing(groups.groups, "coordinator")  # type: ignore[assignment]
        return Broker(engine=engine, storage=self.storage, node_id=1, host="127.0.0.1", port=9092,  # type: ignore[arg-type]
                      cluster_id="never-raise", versions=advertised(), groups=groups,
                      wakeups=self.wakeups)

    def answer(self, api_key: int, version: int, request: Any) -> None:
        frame = encode_request(api_key, version, 1, "never-raise", request)[4:]
        header = parse_request_header(frame)
        call = HANDLERS[api_key].fn(self.broker, RequestContext.of(header), decode_view(header, frame))
        fields = self.loop.run_until_complete(asyncio.wait_for(call, 10))
        if isinstance(fields, Deferred):  # Produce: the answer awaited after its appends
            fields = self.loop.run_until_complete(asyncio.wait_for(fields.answer, 10))
        if isinstance(fields, Unanswered):  # Produce with acks=0: the answer it does not get must build too
            fields = fields.fields
        assert encode_response(header, build_response(api_key, version, fields))

    def close(self) -> None:
        self.broker.groups.close()
        self.loop.run_until_complete(self.storage.call(self.engine.close))
        self.storage.shutdown()
        self.loop.close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    rig = Rig(tmp_path_factory.mktemp("never-raise") / "data")
    yield rig
    rig.close()


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
@settings(max_examples=8, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_handler_answers_when_everything_fails(rig: Rig, api_key: int, version: int, data: st.DataObject) -> None:
    rig.answer(api_key, version, data.draw(instances(request_class(api_key, version))))
