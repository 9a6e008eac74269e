"""``walgate cluster elect``: Kafka's kafka-leader-election, over ElectLeaders (KIP-460) and Metadata.

PREFERRED (the default) moves each partition's leadership to its first replica when that one is in sync; UNCLEAN
elects a leader of partitions that have none, from outside the ISR if need be. One row per partition answered:
``elected``, or Kafka's error name (``ELECTION_NOT_NEEDED``: its leader already is the one asked for), and the
leader Metadata names afterwards. Without ``--topic`` every partition is asked and, as Kafka answers, only those that
needed an election are listed. Exit code 1 when some partition's election failed for another reason than
ELECTION_NOT_NEEDED, as kafka-leader-election fails.
"""

from __future__ import annotations

import argparse

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from walgate.admin.client import AdminError, UsageError, connect, describe_error, result
from walgate.admin.output import print_json, print_table

__all__ = ["elect"]


def elect(args: argparse.Namespace) -> None:
    """``walgate cluster elect [--preferred|--unclean] [--topic T [--partition P]] [--json]``."""
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    conn = connect(args)
    election = ElectionType.UNCLEAN if args.unclean else ElectionType.PREFERRED
    partitions = None
    if args.topic is not None:
        known = conn.partitions(args.topic)
        if args.partition is not None and args.partition not in known:
            raise AdminError(f"topic '{args.topic}' has no partition {args.partition}")
        partitions = [TopicPartition(args.topic, p) for p in ([args.partition] if args.partition is not None else known)]
    # (no request_timeout: confluent-kafka 2.16.1's elect_leaders raises SystemError on any keyword argument; the wait
    # for its answer is bounded by result())
    future = conn.admin.elect_leaders(election, partitions)
    # each partition's answer: None (elected) or its KafkaError (confluent-kafka's docs say KafkaException; 2.16.1
    # gives the error itself: both taken)
    answers: dict[TopicPartition, KafkaError | KafkaException | None] = result(
        future, f"{election.name.lower()} leader election", conn.timeout)
    topics = conn.admin.list_topics(timeout=conn.timeout).topics
    rows = []
    failed = 0
    for tp in sorted(answers, key=lambda t: (t.topic, t.partition)):
        answer = answers[tp]
        error = answer.args[0] if isinstance(answer, KafkaException) else answer
        failed += error is not None and error.code() != KafkaError.ELECTION_NOT_NEEDED
        meta = topics.get(tp.topic)
        part = None if meta is None else meta.partitions.get(tp.partition)
        rows.append({"topic": tp.topic, "partition": tp.partition,
                     "result": "elected" if error is None else error.name(),
                     "message": None if error is None else describe_error(error),
                     "leader": None if part is None or part.leader < 0 else part.leader})
    if args.json:
        print_json(rows)
    else:
        print_table(["TOPIC", "PARTITION", "RESULT", "LEADER"],
                    [[r["topic"], r["partition"], r["result"], r["leader"]] for r in rows])
    if failed:
        raise AdminError(f"the {election.name.lower()} election failed for {failed} partition(s)")
