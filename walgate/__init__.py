"""walgate: a Kafka-wire-protocol gateway over TDengine-style vnode WAL storage."""

__version__ = "0.1.0"
