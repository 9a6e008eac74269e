"""The serialisers behind :mod:`walgate.wire.protocol`, compiled from kio's schema dataclasses.

===================  ==============================================================
module               owns
===================  ==============================================================
:mod:`.runtime`      the encode/decode primitives generated code calls (varints,
                     strings, bytes, arrays, tagged fields), :data:`BIG_VALUE`
:mod:`.fields`       :func:`fields_of`: a schema dataclass's fields, Kafka types, defaults
:mod:`.codegen`      :func:`decoder` / :func:`encoder`: bounded decoders and chunked
                     encoders generated per class (and why not kio's own)
:mod:`.builders`     :func:`builder`: dataclasses from version-agnostic mappings
===================  ==============================================================
"""

from __future__ import annotations

from walgate.wire.serial.builders import Builder, builder
from walgate.wire.serial.codegen import Decoder, Encoder, decoder, encoder
from walgate.wire.serial.fields import FieldInfo, fields_of, zero_value
from walgate.wire.serial.runtime import (
    BIG_VALUE,
    chunk_len,
    read_uvarint,
    write_uvarint,
)

__all__ = [
    "BIG_VALUE",
    "Builder",
    "Decoder",
    "Encoder",
    "FieldInfo",
    "builder",
    "chunk_len",
    "decoder",
    "encoder",
    "fields_of",
    "read_uvarint",
    "write_uvarint",
    "zero_value",
]
