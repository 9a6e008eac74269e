"""Generate, compile and cache a decoder and an encoder per kio schema dataclass.

Why not kio's own reader and writer
-----------------------------------
kio's dataclasses (generated from Apache Kafka's JSON message descriptors) are the
schemas; walgate only replaces kio's *serialisers*, for three measured reasons:

* kio 0.6.5's native reader pre-allocates arrays from the untrusted length prefix:
  a 60-byte garbage frame made it request ~240 GB and **abort the process**
  (Rust ``handle_alloc_error``). A gateway must survive any bytes a peer sends.
* kio's reader raises ``KeyError`` on unknown tagged fields; the protocol says skip them.
* kio's writer issues one ``struct.pack`` + ``write`` per field and copies ``records``
  into a ``BytesIO``; Fetch responses want few chunks and no copy of big record sets.

How it works
------------
For every dataclass (request, response or nested struct) the field list
(:func:`~walgate.wire.serial.fields.fields_of`) is turned into Python source for
one function, compiled in the namespace of :data:`~walgate.wire.serial.runtime.RUNTIME`
(the technique ``dataclasses`` and ``attrs`` use) and cached per class; the source
is kept on the function as ``__source__``.

``decoder(cls)(data, pos) -> (instance, new_pos)``
    (``decoder(cls, view, entities)``: an instance of the request view, see :func:`decoder`, its slots set through
    their descriptors, which costs less than a frozen dataclass's ``__init__``).
    Runs of fixed-width fields are read with one precompiled ``struct`` call.
    Every length (strings, bytes, arrays) is checked against the bytes remaining
    before anything is allocated; unknown tagged fields are skipped. Strings are
    decoded as UTF-8 with replacement characters, as Kafka's Java broker does
    (``new String(bytes, UTF_8)``). Values have kio's types (``ErrorCode``,
    ``timedelta``, tz-aware ``datetime``, ``UUID | None``).

``encoder(cls)(buf, out, instance) -> buf``
    Appends the encoding to the ``bytearray`` *buf*. A ``bytes``/``records``
    value of at least :data:`~walgate.wire.serial.runtime.BIG_VALUE` bytes is not
    copied: *buf* is appended to the chunk list *out*, then the value itself, and
    a fresh ``bytearray`` is returned to continue with. A ``records`` field may
    also hold a *sequence* of buffers (for example several stored batches),
    written back to back without joining them (a walgate extension; kio's own
    writer wants bytes). Such a sequence may also hold sized non-buffer chunks of
    at least ``BIG_VALUE`` bytes (the gateway's file regions, sent with sendfile):
    only their ``len()`` is used here. The encoder is lenient about value types
    where it is free: ``int`` or ``ErrorCode``, ``int`` milliseconds or
    ``timedelta``, ``bytes``/``bytearray``/``memoryview``. Tagged fields equal to
    their default are omitted, as kio and Kafka do.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from walgate.wire.serial.fields import FIXED, FieldInfo, fields_of, zero_value
from walgate.wire.serial.runtime import RUNTIME

__all__ = ["Decoder", "Encoder", "Source", "decoder", "encoder"]

Decoder = Callable[[bytes, int], tuple[Any, int]]
"""``(data, pos) -> (instance, new_pos)``."""
Encoder = Callable[[bytearray, list[Any], Any], bytearray]
"""``(buf, out, instance) -> buf`` (see the module doc)."""


class Source:
    """Accumulates generated source lines and the names they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = dict(RUNTIME)
        self._n = 0

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def ref(self, value: Any, prefix: str) -> str:
        self._n += 1
        name = f"{prefix}{self._n}"
        self.ns[name] = value
        return name

    def compile(self, name: str) -> Callable[..., Any]:
        source = "\n".join(self.lines) + "\n"
        exec(compile(source, f"<walgate.wire.serial.codegen {name}>", "exec"), self.ns)  # noqa: S102
        func = self.ns[name]
        func.__source__ = source
        return typing.cast(Callable[..., Any], func)


def _fixed_runs(infos: Sequence[FieldInfo]) -> list[list[FieldInfo] | FieldInfo]:
    """Group consecutive fixed-width scalar (non-tagged) fields for one struct call."""
    groups: list[list[FieldInfo] | FieldInfo] = []
    run: list[FieldInfo] = []
    for info in infos:
        if info.kind in FIXED and not info.array:
            run.append(info)
            continue
        if run:
            groups.append(run)
            run = []
        groups.append(info)
    if run:
        groups.append(run)
    return groups


# --------------------------------------------------------------------------- decoders

_DECODERS: dict[tuple[type, type | None], Decoder] = {}


def _fixed_convert(info: FieldInfo, var: str) -> str:
    kind = info.kind
    if kind == "error_code":
        return f"_EC[{var}]"
    if kind in ("timedelta_i32", "timedelta_i64"):
        return f"_td({var})"
    if kind == "datetime_i64":
        return f"_ndt({var})" if info.nullable else f"_dt({var})"
    if kind == "uuid":
        return f"_uuid({var})"
    return var


def _decode_value(src: Source, info: FieldInfo, var: str, flexible: bool, indent: int,
                  nested: Callable[[FieldInfo], Decoder]) -> None:
    """Emit code reading one field value into *var*, advancing ``p``; *nested* gives a struct field's decoder."""
    kind = info.kind
    nullable = info.nullable
    if info.array:
        src.emit(indent, f"n, p = {'_clen' if flexible else '_len32'}(d, p, {nullable})")
        if nullable:
            src.emit(indent, "if n < 0:")
            src.emit(indent + 1, f"{var} = None")
            src.emit(indent, "else:")
        else:
            indent -= 1  # the body below is emitted at indent + 1
        if kind in ("int8", "int16", "int32", "int64", "uint16", "float64"):
            code = FIXED[kind]
            src.emit(indent + 1, f"{var} = _struct.unpack_from('>%d{code}' % n, d, p)")
            src.emit(indent + 1, f"p += n * {struct.calcsize(code)}")
            return
        src.emit(indent + 1, "items = []")
        src.emit(indent + 1, "for _ in range(n):")
        if kind == "entity":
            src.emit(indent + 2, f"x, p = {src.ref(nested(info), '_dec')}(d, p)")
        else:
            _decode_value(src, dataclasses.replace(info, array=False, nullable=False), "x", flexible, indent + 2,
                          nested)
        src.emit(indent + 2, "items.append(x)")
        src.emit(indent + 1, f"{var} = tuple(items)")
        return
    if kind == "entity":
        dec = src.ref(nested(info), "_dec")
        if nullable and info.tag is None:
            src.emit(indent, "marker = d[p]")
            src.emit(indent, "p += 1")
            src.emit(indent, "if marker > 127:")
            src.emit(indent + 1, f"{var} = None")
            src.emit(indent, "else:")
            src.emit(indent + 1, f"{var}, p = {dec}(d, p)")
        else:
            src.emit(indent, f"{var}, p = {dec}(d, p)")
        return
    if kind == "string":
        src.emit(indent, f"{var}, p = {'_cstr' if flexible else '_str16'}(d, p, {nullable})")
        return
    if kind in ("bytes", "records"):
        src.emit(indent, f"{var}, p = {'_cbytes' if flexible else '_bytes32'}(d, p, {nullable})")
        return
    single_byte = {"bool": "d[p] != 0", "uint8": "d[p]", "int8": "(d[p] ^ 128) - 128"}
    if kind in single_byte:
        src.emit(indent, f"{var} = {single_byte[kind]}")
        src.emit(indent, "p += 1")
        return
    code = FIXED[kind]
    unpack = src.ref(struct.Struct(">" + code).unpack_from, "_U")
    src.emit(indent, f"{var}, = {unpack}(d, p)")
    src.emit(indent, f"p += {struct.calcsize('>' + code)}")
    converted = _fixed_convert(info, var)
    if converted != var:
        src.emit(indent, f"{var} = {converted}")


def decoder(cls: type, view: type | None = None,
            entities: Mapping[type, Mapping[str, type]] | None = None) -> Decoder:
    """The decoder of a schema dataclass: ``(data, pos) -> (instance, new_pos)``.

    With *view*, the instance is a *view* instead (:mod:`walgate.wire.messages`: a dataclass with every field of
    every version of *cls*'s message, each with a default): the fields *cls* has are read as for *cls*, the others
    keep the view's defaults; *entities* maps a view to its struct fields' views (``messages.ENTITIES``).

    It raises :class:`MalformedFrame` for bounds violations it detects and lets
    ``struct.error``/``IndexError``/``KeyError`` escape for truncation detected
    by Python itself; :func:`walgate.wire.protocol.decode_request` converts those.
    """
    cached = _DECODERS.get((cls, view))
    if cached is not None:
        return cached
    infos = fields_of(cls)
    flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
    src = Source()
    cls_ref = src.ref(cls if view is None else view, "_cls")

    def nested(info: FieldInfo) -> Decoder:
        assert info.entity is not None
        if view is None or entities is None:
            return decoder(info.entity)
        return decoder(info.entity, entities[view][info.name], entities)

    if view is not None:
        defaults = {f.name: f.default for f in dataclasses.fields(view)}

    name = f"decode_{cls.__name__}"
    src.emit(0, f"def {name}(d, p):")
    plain = [i for i in infos if i.tag is None]
    tagged = sorted((i for i in infos if i.tag is not None), key=lambda i: i.tag or 0)
    local = {info.name: f"v_{info.name}" for info in infos}
    for group in _fixed_runs(plain):
        if isinstance(group, list):
            fmt = ">" + "".join(FIXED[i.kind] for i in group)
            if len(group) == 1:
                _decode_value(src, group[0], local[group[0].name], flexible, 1, nested)
                continue
            unpack = src.ref(struct.Struct(fmt).unpack_from, "_U")
            names = ", ".join(local[i.name] for i in group)
            src.emit(1, f"{names}, = {unpack}(d, p)")
            src.emit(1, f"p += {struct.calcsize(fmt)}")
            for info in group:
                converted = _fixed_convert(info, local[info.name])
                if converted != local[info.name]:
                    src.emit(1, f"{local[info.name]} = {converted}")
            continue
        _decode_value(src, group, local[group.name], flexible, 1, nested)
    if flexible:
        for info in tagged:
            default = zero_value(info) if view is None else defaults[info.name]
            src.emit(1, f"{local[info.name]} = {src.ref(default, '_default')}")
        src.emit(1, "ntags = d[p]")
        src.emit(1, "p += 1")
        src.emit(1, "if ntags > 127:")
        src.emit(2, "ntags, p = _uvar(d, p - 1)")
        src.emit(1, "for _ in range(ntags):")
        src.emit(2, "tag, p = _uvar(d, p)")
        src.emit(2, "size, p = _uvar(d, p)")
        src.emit(2, "end = p + size")
        src.emit(2, "if end > len(d):")
        src.emit(3, "raise _Malformed(f'tagged field {tag} of {size} bytes overruns the buffer')")
        for index, info in enumerate(tagged):
            src.emit(2, f"{'if' if index == 0 else 'elif'} tag == {info.tag}:")
            _decode_value(src, info, local[info.name], flexible, 3, nested)
            src.emit(3, "if p != end:")
            src.emit(4, "raise _tag_overrun(tag, p, end)")
        src.emit(2, "p = end")
    if view is None:
        args = ", ".join(f"{info.name}={local[info.name]}" for info in infos)
        src.emit(1, f"return {cls_ref}({args}), p")
    else:  # every slot set through its descriptor: a frozen dataclass's __init__ pays a call per field
        src.emit(1, f"o = _new({cls_ref})")
        for f in dataclasses.fields(view):
            value = local[f.name] if f.name in local else src.ref(f.default, "_default")
            src.emit(1, f"{src.ref(getattr(view, f.name).__set__, '_set')}(o, {value})")
        src.emit(1, "return o, p")
        src.ns["_new"] = object.__new__
    func = typing.cast(Decoder, src.compile(name))
    _DECODERS[(cls, view)] = func
    return func


# --------------------------------------------------------------------------- encoders

_ENCODERS: dict[type, Encoder] = {}


def _fixed_arg(info: FieldInfo, expr: str) -> str:
    kind = info.kind
    if kind in ("timedelta_i32", "timedelta_i64"):
        return f"_ms({expr})"
    if kind == "datetime_i64":
        return f"_dtms({expr})"
    if kind == "uuid":
        return f"_ub({expr})"
    return expr


def _encode_value(src: Source, info: FieldInfo, expr: str, flexible: bool, indent: int) -> None:
    """Emit code appending one field value (held in local *expr*) to ``b``."""
    kind = info.kind
    if info.array:
        if info.nullable:
            src.emit(indent, f"if {expr} is None:")
            src.emit(indent + 1, "b.append(0)" if flexible else "b += _NULL32")
            src.emit(indent, "else:")
        else:
            indent -= 1  # the body below is emitted at indent + 1
        if flexible:
            src.emit(indent + 1, f"_wuvar(b, len({expr}) + 1)")
        else:
            src.emit(indent + 1, f"b += _P32(len({expr}))")
        if kind in ("int8", "int16", "int32", "int64", "uint16", "float64"):
            src.emit(indent + 1, f"b += _struct.pack('>%d{FIXED[kind]}' % len({expr}), *{expr})")
            return
        src.emit(indent + 1, f"for y in {expr}:")
        if kind == "entity":
            src.emit(indent + 2, f"b = {src.ref(encoder(info.entity), '_enc')}(b, out, y)")  # type: ignore[arg-type]
        else:
            _encode_value(src, dataclasses.replace(info, array=False, nullable=False), "y", flexible, indent + 2)
        return
    if kind == "entity":
        enc = src.ref(encoder(info.entity), "_enc")  # type: ignore[arg-type]
        if info.nullable and info.tag is None:
            src.emit(indent, f"if {expr} is None:")
            src.emit(indent + 1, "b.append(255)")
            src.emit(indent, "else:")
            src.emit(indent + 1, "b.append(1)")
            src.emit(indent + 1, f"b = {enc}(b, out, {expr})")
        else:
            src.emit(indent, f"b = {enc}(b, out, {expr})")
        return
    if kind == "string":
        writer = ("_wncs" if flexible else "_wns16") if info.nullable else ("_wcs" if flexible else "_ws16")
        src.emit(indent, f"{writer}(b, {expr})")
        return
    if kind in ("bytes", "records"):
        if info.nullable:
            src.emit(indent, f"if {expr} is None:")
            src.emit(indent + 1, "b.append(0)" if flexible else "b += _NULL32")
            src.emit(indent, "else:")
            indent += 1
        src.emit(indent, f"b = _wbytes(b, out, {expr}, {flexible})")
        return
    single_byte = {"uint8": expr, "bool": f"1 if {expr} else 0"}
    if kind in single_byte:
        src.emit(indent, f"b.append({single_byte[kind]})")
        return
    pack = src.ref(struct.Struct(">" + FIXED[kind]).pack, "_P")
    src.emit(indent, f"b += {pack}({_fixed_arg(info, expr)})")


def encoder(cls: type) -> Encoder:
    """The encoder of a schema dataclass: ``(buf, out, instance) -> buf`` (see module doc)."""
    cached = _ENCODERS.get(cls)
    if cached is not None:
        return cached
    infos = fields_of(cls)
    flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
    src = Source()
    name = f"encode_{cls.__name__}"
    src.emit(0, f"def {name}(b, out, v):")
    plain = [i for i in infos if i.tag is None]
    tagged = sorted((i for i in infos if i.tag is not None), key=lambda i: i.tag or 0)
    for group in _fixed_runs(plain):
        if isinstance(group, list):
            if len(group) == 1:
                src.emit(1, f"x = v.{group[0].name}")
                _encode_value(src, group[0], "x", flexible, 1)
                continue
            pack = src.ref(struct.Struct(">" + "".join(FIXED[i.kind] for i in group)).pack, "_P")
            args = ", ".join(_fixed_arg(i, f"v.{i.name}") for i in group)
            src.emit(1, f"b += {pack}({args})")
            continue
        src.emit(1, f"x = v.{group.name}")
        _encode_value(src, group, "x", flexible, 1)
    if flexible:
        if not tagged:
            src.emit(1, "b.append(0)")
        else:
            src.emit(1, "tags = []")
            for info in tagged:
                default = src.ref(zero_value(info), "_default")
                src.emit(1, f"x = v.{info.name}")
                src.emit(1, f"if x != {default}:")
                value_encoder = src.ref(_value_encoder(info), "_tagenc")
                src.emit(2, f"tags.append(({info.tag}, _tag_bytes({value_encoder}, x)))")
            src.emit(1, "_wtags(b, tags)")
    src.emit(1, "return b")
    func = typing.cast(Encoder, src.compile(name))
    _ENCODERS[cls] = func
    return func


def _value_encoder(info: FieldInfo) -> Encoder:
    """A stand-alone encoder for one (tagged) field value, in flexible encoding."""
    src = Source()
    src.emit(0, "def encode_value(b, out, x):")
    _encode_value(src, info, "x", True, 1)
    src.emit(1, "return b")
    return typing.cast(Encoder, src.compile("encode_value"))
