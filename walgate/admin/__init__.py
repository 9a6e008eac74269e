"""The admin commands of the ``walgate`` CLI, in the spirit of rpk and Kafka's tools: ``topic``, ``group``,
``consume`` and ``produce``.

They speak only the Kafka protocol (confluent-kafka's AdminClient, Consumer and Producer) to
``--bootstrap-server`` (default 127.0.0.1:9092), so they work against any broker as well as walgate, and never
import the server. Tables for people, ``--json`` for programs; exit code 0 on success, 1 when the server refused
a request or could not be reached within ``--timeout``, 2 for bad usage, with one ``walgate: ...`` line on stderr.

Modules: ``commands`` (the argparse surface; imports nothing heavy), ``client`` (connecting, errors),
``client_properties`` (``--command-config`` / ``-X`` client settings for TLS and SASL listeners, read with the
server's pure properties parser), ``output`` (tables, JSON, exit codes), and one per command group: ``topics``,
``groups``, ``consume``, ``produce``.
"""

from __future__ import annotations

from walgate.admin.commands import add_commands

__all__ = ["add_commands"]
