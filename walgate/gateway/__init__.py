"""The imperative shell: the asyncio server, its listeners and handlers, the storage thread, the HTTP API, metrics,
the web console, config and the CLI — the only layer with I/O and an event loop (docs/architecture.md)."""
