"""A Quix Streams application: per-subtable tumbling-window COUNT and SUM(voltage) over a TDengine topic.

The input is a topic of meter rows (``CREATE TOPIC ... AS STABLE``): key = subtable name, value = the row as JSON,
timestamp = the row's ts, which is the event time the windows use. Each window closes (``final()``) once a later
row of the same subtable arrives; its result goes to OUTPUT as JSON ``{"start", "end", "count", "sum"}`` under
the subtable's key. State lives in RocksDB under STATE_DIR, backed by Quix's compacted changelog topics; with
exactly-once, the transactional id is GROUP-windows, the same after a restart.
Runs until killed. Prints a ``started`` JSON line once the application is built.

Usage: quix_windows.py BOOTSTRAP INPUT OUTPUT GROUP STATE_DIR [--guarantee exactly-once|at-least-once]
       [--window-ms 120000]
"""

from __future__ import annotations

import argparse
import json

import quixstreams
from quixstreams import Application
from quixstreams.dataframe.windows import Count, Sum


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    for name in ("bootstrap", "input", "output", "group", "state_dir"):
        ap.add_argument(name)
    ap.add_argument("--guarantee", default="exactly-once")
    ap.add_argument("--window-ms", type=int, default=120_000)
    args = ap.parse_args()
    app = Application(
        broker_address=args.bootstrap, consumer_group=args.group, auto_offset_reset="earliest",
        processing_guarantee=args.guarantee, state_dir=args.state_dir, commit_interval=1.0, loglevel="INFO",
        # one transactional id across restarts (Quix draws a random one by default): a restarted application
        # fences its killed predecessor, whose open transaction is aborted at once instead of after its timeout
        producer_extra_config={"transactional.id": f"{args.group}-windows"} if args.guarantee == "exactly-once" else {},
        # a killed predecessor leaves the group when its session ends: 10 s (Kafka's minimum is 6 s) instead of
        # librdkafka's 45 s, which a restarted application would wait out before it gets the partitions
        consumer_extra_config={"session.timeout.ms": 10_000},
    )
    rows = app.topic(args.input, key_deserializer="str", value_deserializer="json")
    windows = app.topic(args.output, key_serializer="str", value_serializer="json")
    sdf = app.dataframe(rows)
    sdf = sdf.tumbling_window(duration_ms=args.window_ms).agg(count=Count(), sum=Sum("voltage")).final()
    sdf.to_topic(windows)
    print(json.dumps({"event": "started", "quixstreams": quixstreams.__version__, "guarantee": args.guarantee}),
          flush=True)
    app.run()


if __name__ == "__main__":
    main()
