"""The admin commands' command line: ``walgate topic``, ``group``, ``consume`` and ``produce`` with their options.

Building the parser imports neither confluent-kafka nor the command modules: a command's module is imported when
it runs (:func:`_lazy`), so ``walgate sql`` and ``walgate serve`` start as fast as before. Every admin command
takes ``--bootstrap-server``, ``--timeout``, ``--command-config`` and ``-X`` (client settings for TLS and SASL
listeners); ``run`` is set to a function returning the exit code.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

__all__ = ["DEFAULT_BOOTSTRAP", "DEFAULT_FORMAT", "DEFAULT_TIMEOUT", "DEFAULT_URL", "add_commands", "add_decommission",
           "add_elect", "add_reassign", "datetime_ms", "partition_move",
           "kafka_flags", "key_value", "topic_partitions"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_URL = "http://127.0.0.1:6041"  # a node's HTTP API: `walgate sql`, `walgate cluster decommission`
DEFAULT_TIMEOUT = 10.0  # seconds: bounds connecting and every request
DEFAULT_FORMAT = r"Partition:%p\tOffset:%o\t%d\t%h\t%k\t%v"  # `walgate consume`, as kafka-console-consumer prints

_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def add_commands(commands: _Commands) -> None:
    """Add ``topic``, ``group``, ``consume`` and ``produce`` to the ``walgate`` subcommands."""
    common = kafka_flags()
    for add in (_add_topic, _add_group, _add_share_group, _add_consume, _add_produce):
        add(commands, common)


def kafka_flags() -> argparse.ArgumentParser:
    """The flags of every command that speaks Kafka's protocol (a parent parser): ``--bootstrap-server``,
    ``--timeout``, ``--command-config``, ``-X``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-b", "--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                        help=f"Kafka listener to talk to (default {DEFAULT_BOOTSTRAP})")
    common.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                        help=f"give up on connecting or on any request after S seconds (default {DEFAULT_TIMEOUT:g})")
    common.add_argument("--command-config", metavar="FILE",
                        help="client settings (properties file, as Kafka's tools): security.protocol, ssl.ca.location, "
                             "sasl.mechanism, sasl.username, ...; the Java client's ssl.truststore.*, ssl.keystore.* "
                             "(PEM) and sasl.jaas.config are translated")
    common.add_argument("-X", action="append", default=[], type=key_value, dest="client_settings", metavar="KEY=VALUE",
                        help="one client setting, as kcat -X (repeatable; after --command-config)")
    return common


def add_elect(actions: _Commands) -> None:
    """``walgate cluster elect`` (the cluster command's actions: walgate/gateway/cluster_up.py)."""
    elect = actions.add_parser("elect", parents=[kafka_flags()],
                               help="elect preferred (or unclean) leaders of partitions (Kafka protocol, as "
                                    "kafka-leader-election)")
    kind = elect.add_mutually_exclusive_group()
    kind.add_argument("--preferred", action="store_true",
                      help="move leadership to each partition's first replica if it is in sync (the default)")
    kind.add_argument("--unclean", action="store_true",
                      help="elect a leader of partitions that have none, from outside the ISR if need be (may lose "
                           "acknowledged records)")
    elect.add_argument("--topic", metavar="TOPIC", help="only this topic's partitions (default: every partition)")
    elect.add_argument("--partition", type=int, metavar="P", help="only partition P of --topic")
    elect.add_argument("--json", action="store_true", help="print one JSON array")
    elect.set_defaults(run=_lazy("elect", "elect"))


def add_reassign(actions: _Commands) -> None:
    """``walgate cluster reassign`` (the cluster command's actions: walgate/gateway/cluster_up.py)."""
    reassign = actions.add_parser("reassign", parents=[kafka_flags()],
                                  help="move partitions' replicas, cancel moves, list those in progress (Kafka "
                                       "protocol, as kafka-reassign-partitions)")
    reassign.add_argument("-p", "--partition", action="append", default=[], type=partition_move, dest="moves",
                          metavar="TOPIC/PARTITION[:R1,R2,...]",
                          help="a partition to move to nodes R1,R2,... (the first its preferred leader); with "
                               "--cancel, one whose move to cancel (repeatable)")
    kind = reassign.add_mutually_exclusive_group()
    kind.add_argument("--cancel", action="store_true", help="cancel the moves of the -p partitions")
    kind.add_argument("--list", action="store_true", help="list the moves in progress")
    reassign.add_argument("--topic", metavar="TOPIC", help="with --list: only this topic's")
    reassign.add_argument("--json", action="store_true", help="print one JSON array")
    reassign.set_defaults(run=_lazy("reassign", "reassign"))


def add_decommission(actions: _Commands) -> None:
    """``walgate cluster decommission`` and ``rebalance`` (the cluster command's actions), through the HTTP API of
    the node at ``--url``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=DEFAULT_URL, help=f"a node's HTTP API base URL (default {DEFAULT_URL})")
    common.add_argument("--user", "-u", help="walgate user for HTTP Basic auth (as walgate sql --user; a super user "
                                             "when ACLs are on)")
    common.add_argument("--wait", action="store_true", help="follow the moves until they are done")
    common.add_argument("--wait-timeout", type=float, default=3600.0, metavar="S",
                        help="with --wait: give up (exit 1; the moves go on) after S seconds (default 3600)")
    common.add_argument("--json", action="store_true", help="one JSON document at the end")
    decommission = actions.add_parser("decommission", parents=[common],
                                      help="move every replica off node N (TDengine's DROP DNODE); stop it after")
    decommission.add_argument("node", type=int, metavar="N", help="the node id")
    decommission.set_defaults(run=_lazy("decommission", "decommission"))
    rebalance = actions.add_parser("rebalance", parents=[common], help="even out replicas and preferred leaders over "
                                   "the live nodes (TDengine's BALANCE VGROUP)")
    rebalance.add_argument("--leaders", action="store_true",
                           help="elect each vgroup's preferred leader instead (BALANCE VGROUP LEADER)")
    rebalance.set_defaults(run=_lazy("decommission", "rebalance"))


def partition_move(text: str) -> tuple[str, int, tuple[int, ...] | None]:
    """``TOPIC/PARTITION:R1,R2,...`` (or ``TOPIC/PARTITION``: no replicas, for ``--cancel``) as (topic, partition,
    replicas or None); argparse's type."""
    named, sep, replicas = text.rpartition(":") if ":" in text else (text, "", "")
    topic, slash, partition = named.rpartition("/")
    try:
        target = tuple(int(r) for r in replicas.split(",")) if sep else None
        if not topic or not slash or int(partition) < 0 or (target is not None and not target):
            raise ValueError
        return topic, int(partition), target
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TOPIC/PARTITION:R1,R2,... (node ids)") from None


def _lazy(module: str, command: str) -> Callable[[argparse.Namespace], int]:
    """``walgate.admin.<module>.<command>`` run through :func:`walgate.admin.output.guarded`, imported on first use."""

    def run(args: argparse.Namespace) -> int:
        from walgate.admin.output import guarded

        code: int = guarded(getattr(importlib.import_module(f"walgate.admin.{module}"), command))(args)
        return code

    return run


def key_value(text: str) -> tuple[str, str]:
    """``"k=v"`` → ``("k", "v")`` (``--config``, ``--set``, ``--header``, ``-X``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    return key, value


def topic_partitions(text: str) -> tuple[str, list[int] | None]:
    """``"t"`` → ``("t", None)`` (every partition), ``"t:0,2"`` → ``("t", [0, 2])``, as kafka-consumer-groups."""
    topic, sep, partitions = text.partition(":")
    try:
        if topic and not sep:
            return topic, None
        if topic and partitions:
            return topic, sorted({int(p) for p in partitions.split(",")})
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P1,P2,..., got '{text}'")


def datetime_ms(text: str) -> int:
    """An ISO 8601 date-time (``2026-01-31T12:00:00``, optional ``.sss`` and ``Z`` / ``±hh:mm``; local time when it
    names no zone, as Kafka's tools take it) as milliseconds since the epoch."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date-time: '{text}' (e.g. 2026-01-31T12:00:00.000Z)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _add_topic(commands: _Commands, common: argparse.ArgumentParser) -> None:
    topic = commands.add_parser("topic", help="list, describe, create, delete topics or alter their configs (Kafka protocol)")
    actions = topic.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="topics with partitions and replication factor")
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    listing.set_defaults(run=_lazy("topics", "list_topics"))

    describe = actions.add_parser("describe", parents=[common], help="partitions (leader, log start/end offsets) and configs")
    describe.add_argument("topics", nargs="+", metavar="TOPIC")
    describe.add_argument("--json", action="store_true", help="print one JSON array")
    describe.set_defaults(run=_lazy("topics", "describe_topics"))

    create = actions.add_parser("create", parents=[common], help="create Kafka-native topics")
    create.add_argument("topics", nargs="+", metavar="TOPIC")
    create.add_argument("-p", "--partitions", type=int, default=-1, metavar="N", help="partitions (default: the server's)")
    create.add_argument("-r", "--replication-factor", type=int, default=-1, metavar="N",
                        help="replication factor (default: the server's; walgate has 1 only)")
    create.add_argument("-c", "--config", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                        help="a topic config such as retention.ms=86400000 (repeatable)")
    create.set_defaults(run=_lazy("topics", "create_topics"))

    delete = actions.add_parser("delete", parents=[common], help="delete topics and their records")
    delete.add_argument("topics", nargs="+", metavar="TOPIC")
    delete.set_defaults(run=_lazy("topics", "delete_topics"))

    alter = actions.add_parser("alter-config", parents=[common], help="set or delete (back to default) topic configs")
    alter.add_argument("topic", metavar="TOPIC")
    alter.add_argument("--set", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                       help="set a config (repeatable)")
    alter.add_argument("--delete", action="append", default=[], metavar="KEY", help="reset a config to its default (repeatable)")
    alter.set_defaults(run=_lazy("topics", "alter_config"))


def _reset_arguments(reset: argparse.ArgumentParser, offsets: str, verb: str) -> Any:
    """A reset-offsets command's group, scope (``--topic`` / ``--all-topics``), mode and ``--json``; its target
    options (``--to-*``), for the caller to add to."""
    reset.add_argument("group", metavar="GROUP")
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", default=[], type=topic_partitions, metavar="TOPIC[:P1,P2]",
                       help="a topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help=f"every partition the group has {offsets} for")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-datetime", type=datetime_ms, metavar="ISO8601",
                        help="the first record at or after this time, e.g. 2026-01-31T12:00:00.000Z (local time "
                             "without a zone); the log end if there is none")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help=f"{verb} the planned offsets")
    reset.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    return target


def _add_group(commands: _Commands, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser("group", help="list, describe (lag), reset offsets of or delete consumer groups (Kafka protocol)")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="consumer groups with state and type")
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    listing.set_defaults(run=_lazy("groups", "list_groups"))

    describe = actions.add_parser("describe", parents=[common],
                                  help="per partition: committed offset, log end offset, lag, owning member")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    describe.add_argument("--json", action="store_true", help="print one JSON array")
    describe.set_defaults(run=_lazy("groups", "describe_groups"))

    reset = actions.add_parser("reset-offsets", parents=[common],
                               help="plan (dry run, the default) or --execute new committed offsets of an inactive group")
    target = _reset_arguments(reset, "committed offsets", "commit")
    target.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (negative: back)")
    reset.set_defaults(run=_lazy("groups", "reset_offsets"))

    delete = actions.add_parser("delete", parents=[common], help="delete inactive groups and their committed offsets")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    delete.set_defaults(run=_lazy("groups", "delete_groups"))


def _add_share_group(commands: _Commands, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser("share-group", help="list, describe (start offsets, lag, members), reset offsets of or "
                                                    "delete share groups (Kafka protocol, as kafka-share-groups)")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="share groups with their state")
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    listing.set_defaults(run=_lazy("share_groups", "list_share_groups"))

    describe = actions.add_parser("describe", parents=[common],
                                  help="per partition: share-partition start offset and lag (or --members)")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    describe.add_argument("--members", action="store_true", help="the members and their assignments instead")
    describe.add_argument("--json", action="store_true", help="print one JSON array")
    describe.set_defaults(run=_lazy("share_groups", "describe_share_groups"))

    reset = actions.add_parser("reset-offsets", parents=[common],
                               help="plan (dry run, the default) or --execute new start offsets of an empty share group")
    _reset_arguments(reset, "offsets", "apply")
    reset.set_defaults(run=_lazy("share_groups", "reset_share_offsets"))

    delete = actions.add_parser("delete", parents=[common],
                                help="delete empty share groups with their state, or (--topic) one group's offsets")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    delete.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                        help="delete only the group's offsets of this topic (repeatable)")
    delete.set_defaults(run=_lazy("share_groups", "delete_share_groups"))


def _add_consume(commands: _Commands, common: argparse.ArgumentParser) -> None:
    consume = commands.add_parser("consume", parents=[common], help="print a topic's records (Kafka protocol)")
    consume.add_argument("topic", metavar="TOPIC")
    consume.add_argument("-g", "--group", help="consume as this consumer group and commit what is printed")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the log start (with --group: where the group has no committed offset)")
    start.add_argument("--offset", type=int, metavar="N", help="start at offset N of every partition read")
    start.add_argument("--from-timestamp", type=datetime_ms, metavar="ISO8601",
                       help="start at the first record at or after this time, e.g. 2026-01-31T12:00:00Z")
    consume.add_argument("-p", "--partition", type=int, metavar="P", help="read only partition P")
    consume.add_argument("-n", "--max-messages", type=int, metavar="N", help="stop after N records")
    consume.add_argument("-e", "--exit-at-end", action="store_true", help="stop when every partition is read to its end")
    output = consume.add_mutually_exclusive_group()
    output.add_argument("-f", "--format", default=DEFAULT_FORMAT,
                        help=r"line per record: %%t topic, %%p partition, %%o offset, %%k key, %%v value, %%h headers, "
                             r"%%T timestamp (ms), %%d timestamp (ISO 8601), \t, \n (default: %(default)s)")
    output.add_argument("--json", action="store_true",
                        help="one JSON object per record: topic, partition, offset, timestamp, key, value, headers")
    consume.set_defaults(run=_lazy("consume", "consume"))


def _add_produce(commands: _Commands, common: argparse.ArgumentParser) -> None:
    produce = commands.add_parser("produce", parents=[common], help="produce one record per input line (Kafka protocol)")
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument("file", nargs="?", default="-", metavar="FILE", help="input lines (default -: stdin)")
    produce.add_argument("-K", "--key-separator", metavar="SEP",
                         help="each line is KEY SEP VALUE (split at the first SEP); default: no key")
    produce.add_argument("-H", "--header", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                         help="a header on every record (repeatable)")
    produce.add_argument("-p", "--partition", type=int, metavar="P",
                         help="produce to partition P (default: by key hash, or spread when there is no key)")
    produce.add_argument("-z", "--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="none",
                         help="batch compression (default none)")
    produce.add_argument("--acks", choices=("0", "1", "all"), default="all",
                         help="0: do not wait, 1 or all: the server stored it (default all)")
    produce.add_argument("--json", action="store_true", help="print the result as one JSON object")
    produce.set_defaults(run=_lazy("produce", "produce"))
