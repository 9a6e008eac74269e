"""The TDengine-style engine: catalog, vnode WALs, ingestion, topic evaluation (synchronous, no network)."""
