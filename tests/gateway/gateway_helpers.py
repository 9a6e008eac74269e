"""An in-process walgate for socket-level tests, and a blocking Kafka connection that speaks through kio.

:func:`gateway_thread` runs a real :class:`~walgate.gateway.server.Gateway` (a real Engine in a data directory of
the test's, Kafka and HTTP on ephemeral ports of 127.0.0.1) on an event loop of its own thread, so that tests talk
to it with plain blocking sockets, as a client process would; it is stopped and its thread joined (bounded) on exit.

:class:`KafkaConnection` frames requests and decodes responses with kio (generated from Kafka's JSON message
schemas, independently of walgate's wire code): a response must decode whole, with its header's version and the
request's correlation id. :func:`build` makes a kio request of any version from one version-agnostic mapping.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import importlib
import io
import json
import queue
import socket
import struct
import threading
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.produce.v9 import request as produce_v9_request
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.static.constants import EntityType

from walgate.gateway.config import Config
from walgate.gateway.server import Gateway
from walgate.wire.protocol import encode_request

__all__ = ["KafkaConnection", "build", "error_codes", "gateway_thread", "kio_classes", "produce_v9", "read_frame",
           "sql"]

STOP_TIMEOUT = 60.0


@contextlib.contextmanager
def gateway_thread(data_dir: Path, **settings: Any) -> Iterator[Gateway]:
    """A started Gateway (``Config(data_dir, ports 0, **settings)``) serving from its own thread's event loop."""
    started: queue.Queue[tuple[Gateway, asyncio.AbstractEventLoop, asyncio.Event] | BaseException] = queue.Queue()

    async def serve() -> None:
        stop = asyncio.Event()
        try:
            async with Gateway(Config(data_dir=data_dir, kafka_port=0, http_port=0, **settings)) as gateway:
                started.put((gateway, asyncio.get_running_loop(), stop))
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            started.put(exc)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="walgate-gateway", daemon=True)
    thread.start()
    got = started.get(timeout=STOP_TIMEOUT)
    if isinstance(got, BaseException):
        thread.join(STOP_TIMEOUT)
        raise got
    gateway, loop, stop = got
    try:
        yield gateway
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(STOP_TIMEOUT)
        assert not thread.is_alive(), "the gateway did not stop"


def sql(gateway: Gateway, statement: str) -> dict[str, Any]:
    """``POST /rest/sql`` to the gateway's HTTP API; raises on an error status."""
    host, port = gateway.http_address
    request = urllib.request.Request(f"http://{host}:{port}/rest/sql", data=statement.encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def produce_v9(correlation_id: int, topic: str, records: bytes, client_id: str = "test") -> bytes:
    """A framed Produce v9 request (acks=1) of ``records`` to partition 0 of ``topic``, for raw-socket tests."""
    request = produce_v9_request.ProduceRequest(acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(
        produce_v9_request.TopicProduceData(name=topic, partition_data=(
            produce_v9_request.PartitionProduceData(index=0, records=records),)),))
    return encode_request(0, 9, correlation_id, client_id, request)


async def read_frame(reader: asyncio.StreamReader, timeout: float) -> tuple[int, bytes]:
    """The next response frame on ``reader``: (its correlation id, the rest), each read bounded by ``timeout``."""
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout))[0]
    body = await asyncio.wait_for(reader.readexactly(size), timeout)
    return struct.unpack(">i", body[:4])[0], body[4:]


def kio_classes(api_key: int, version: int) -> tuple[type, type]:
    """kio's (request, response) dataclasses of an API version; KeyError when kio has no schema for it."""
    paths = schema_name_map[api_key_map[api_key]][version]

    def load(path: str) -> type:
        module, _, name = path.partition(":")
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]

    return load(paths[EntityType.request]), load(paths[EntityType.response])


def _zero(field: dataclasses.Field[Any]) -> Any:
    """The value of a required field the mapping does not give: empty, zero or null, by its Kafka type."""
    cls = classify_field(field)
    if isinstance(cls, (EntityTupleField, PrimitiveTupleField)):
        return ()
    if is_optional(field):
        return None
    if isinstance(cls, EntityField):
        return build(cls.type_, {})
    kind = field.metadata["kafka_type"]
    return {"bool": False, "string": "", "bytes": b"", "records": b"", "float64": 0.0, "error_code": ErrorCode.none,
            "uuid": uuid.UUID(int=0), "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
            "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC)}.get(kind, 0)


def _value(field: dataclasses.Field[Any], value: Any) -> Any:
    cls = classify_field(field)
    if value is None:
        return None
    if isinstance(cls, EntityTupleField):
        return tuple(build(cls.type_, item) for item in value)
    if isinstance(cls, EntityField):
        return build(cls.type_, value)
    if isinstance(cls, PrimitiveTupleField):
        return tuple(value)
    if field.metadata["kafka_type"].startswith("timedelta"):
        return datetime.timedelta(milliseconds=value)
    return value


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """An instance of kio dataclass ``cls`` from a version-agnostic mapping: the keys ``cls`` has are used (nested
    entities as mappings, arrays as lists, durations in ms), other keys are ignored, required fields not given get
    :func:`_zero`, the rest their defaults."""
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name in values:
            kwargs[field.name] = _value(field, values[field.name])
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            kwargs[field.name] = _zero(field)
    return cls(**kwargs)


def error_codes(value: Any) -> list[ErrorCode]:
    """Every error code anywhere in a decoded kio message."""
    if isinstance(value, ErrorCode):
        return [value]
    if dataclasses.is_dataclass(value):
        return [code for f in dataclasses.fields(value) for code in error_codes(getattr(value, f.name))]
    if isinstance(value, tuple):
        return [code for item in value for code in error_codes(item)]
    return []


class KafkaConnection:
    """One blocking Kafka connection; requests are kio instances, responses are decoded with kio."""

    def __init__(self, address: tuple[str, int], timeout: float = 30.0, client_id: str = "walgate-tests") -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.client_id = client_id
        self._correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _header(self, header_cls: Any, api_key: int, version: int) -> tuple[int, bytes]:
        self._correlation_id += 1
        out = io.BytesIO()
        entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                                  correlation_id=self._correlation_id, client_id=self.client_id))
        return self._correlation_id, out.getvalue()

    def send_body(self, header_cls: Any, api_key: int, version: int, body: bytes) -> int:
        """Send a request whose message is already encoded; returns its correlation id."""
        correlation_id, head = self._header(header_cls, api_key, version)
        self.sock.sendall(struct.pack(">i", len(head) + len(body)) + head + body)
        return correlation_id

    def send(self, request: Any) -> int:
        """Send a kio request; returns its correlation id."""
        body = io.BytesIO()
        entity_writer(type(request))(body, request)
        return self.send_body(request.__header_schema__, request.__api_key__, request.__version__, body.getvalue())

    def _read(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {size} bytes")
            data += chunk
        return bytes(data)

    def receive_body(self, header_cls: Any, correlation_id: int) -> tuple[bytes, int]:
        """One response frame: (frame, where its message starts), after checking its header's correlation id."""
        frame = self._read(struct.unpack(">i", self._read(4))[0])
        header, size = entity_reader(header_cls)(frame, 0)
        assert header.correlation_id == correlation_id, (header.correlation_id, correlation_id)
        return frame, size

    def receive(self, response_cls: Any, correlation_id: int) -> Any:
        """The decoded response to the request ``correlation_id``: the whole frame must decode."""
        frame, start = self.receive_body(response_cls.__header_schema__, correlation_id)
        response, size = entity_reader(response_cls)(frame, start)
        assert start + size == len(frame), f"{len(frame) - start - size} bytes after the {response_cls.__name__}"
        return response

    def request(self, request: Any) -> Any:
        """Send a kio request and return kio's decoding of its response."""
        correlation_id = self.send(request)
        return self.receive(kio_classes(request.__api_key__, request.__version__)[1], correlation_id)
