"""Run the compatibility suite and write the client x scenario matrix to docs/compatibility.md.

    .venv/bin/python compat-tests/report.py                 # run compat-tests, then write the matrix
    .venv/bin/python compat-tests/report.py --from FILE     # only render results a run already wrote

Each test's outcome is collected by compat-tests/conftest.py (WALGATE_COMPAT_RESULTS); a test id names the
broker (walgate / tansu), the client and the scenario. The client matrix comes from test_matrix.py (its ``client``
parameter: test_matrix.CLIENTS); the other modules' scenarios follow in a second table, their client taken from
the test's parameters or name. A cell is "pass" when every run of that scenario with that client passed, "FAIL"
otherwise; on Tansu, "xfail" marks a behaviour of Tansu's that differs from Kafka's (compat-tests/FINDINGS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "compatibility.md"
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]  # test_matrix imports the harness (livewalgate)
from test_matrix import CLIENTS as MATRIX_CLIENTS  # noqa: E402

MATRIX = "test_matrix.py"

# token of a test id or name -> client column (first match wins)
CLIENTS = [
    ("old", "kafka-python 2.0.2"),  # test_old_clients.py
    ("ckjs", "@confluentinc/kafka-javascript"), ("javascript", "@confluentinc/kafka-javascript"),  # test_kafka_javascript.py
    ("java-4.3.0", "Java kafka-clients 4.3"), ("4.3.0", "Java kafka-clients 4.3"),
    ("java-3.9", "Java kafka-clients 3.9"), ("3.9", "Java kafka-clients 3.9"),
    ("kcat", "kcat (librdkafka 2.0)"), ("ck", "confluent-kafka"), ("confluent", "confluent-kafka"),
    ("kp", "kafka-python"), ("python", "kafka-python"), ("aio", "aiokafka"),
    ("node", "kafkajs"), ("kafkajs", "kafkajs"), ("java", "Java kafka-clients 4.3"), ("spark", "Java kafka-clients 4.3"),
]
OTHER = "other (one client or a raw socket: see the test)"
ORDER = ["confluent-kafka", "kafka-python", "kafka-python 2.0.2", "aiokafka", "kcat (librdkafka 2.0)", "kafkajs",
         "@confluentinc/kafka-javascript", "Java kafka-clients 4.3",
         "Java kafka-clients 3.9", OTHER]


def classify(nodeid: str) -> tuple[str, str, str]:
    """(broker, client, scenario) of a test id."""
    path, _, rest = nodeid.partition("::")
    name, _, params = rest.partition("[")
    params = params.rstrip("]")
    broker = "tansu" if params.startswith("tansu") else "walgate"
    words = set(re.split(r"[-_.]", params)) | set(name.split("_")) | set(Path(path).stem.split("_"))
    client = OTHER
    for token, column in CLIENTS:
        if (token in params.split("-") or f"-{token}" in params) if re.search(r"[.-]", token) else token in words:
            client = column
            break
    scenario = Path(path).stem.removeprefix("test_") + ": " + name.removeprefix("test_").replace("_", " ")
    return broker, client, scenario


def classify_matrix(nodeid: str) -> tuple[str, str, str]:
    """(broker, client label, scenario) of a test_matrix.py test id: ``name[<broker>-]<client id>[-<param>]``."""
    name, _, params = nodeid.partition("::")[2].partition("[")
    params = params.rstrip("]")
    broker = "walgate"
    for b in ("tansu", "walgate-cluster", "walgate"):
        if params == b or params.startswith(b + "-"):
            broker, params = b, params[len(b) + 1:]
            break
    scenario = name.removeprefix("test_").replace("_", " ")
    clients = [c for c in MATRIX_CLIENTS if params == c.id or params.startswith(c.id + "-")]
    if not clients:  # a scenario of the broker alone (the cluster's spread)
        return broker, "", scenario
    client = max(clients, key=lambda c: len(c.id))
    extra = params[len(client.id) + 1:]
    return broker, client.label, scenario + (f" ({extra})" if extra else "")


def cell(outcomes: set[str]) -> str:
    return ("" if not outcomes else "FAIL" if "failed" in outcomes else "xfail" if "xfail" in outcomes
            else "skip" if outcomes == {"skipped"} else "pass")


def table(rows: dict[str, dict[str, set[str]]], columns: list[str]) -> list[str]:
    columns = [c for c in columns if any(c in v for v in rows.values())]
    out = ["| scenario | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    out += [f"| {scenario} | " + " | ".join(cell(rows[scenario].get(c, set())) for c in columns) + " |"
            for scenario in sorted(rows)]
    return out + [""]


def render(results: list[dict]) -> str:
    matrix: dict[str, dict[str, dict[str, set[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
    other: dict[str, dict[str, dict[str, set[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
    for r in results:
        if Path(r["nodeid"].partition("::")[0]).name == MATRIX:
            broker, client, scenario = classify_matrix(r["nodeid"])
            if broker == "tansu" and r["outcome"] == "skipped":
                continue  # a walgate-only scenario (TDengine topics, retention, groups)
            if not client:
                if r["outcome"] != "skipped":  # a walgate-cluster only scenario, skipped on the others
                    other[broker][f"matrix: {scenario}"][OTHER].add(r["outcome"])
                continue
            matrix[broker][scenario][client].add(r["outcome"])
        else:
            broker, client, scenario = classify(r["nodeid"])
            other[broker][scenario][client].add(r["outcome"])
    out = ["# Compatibility matrix", "",
           "Generated by `compat-tests/report.py` from a run of `compat-tests/` (real, unmodified clients against a",
           "live walgate, and the Tansu peer broker for scenarios on Kafka-native topics). `pass`: every run of the",
           "scenario with that client passed; `FAIL`: one did not; `xfail` (Tansu): Tansu differs from Kafka, see",
           "[FINDINGS.md](../compat-tests/FINDINGS.md); `skip`: the client could not be installed or cannot do it",
           "(e.g. a codec it lacks).", ""]
    labels = [c.label for c in MATRIX_CLIENTS]
    for broker in ("walgate", "walgate-cluster", "tansu"):
        if matrix.get(broker):
            out += [f"## Every client, the same scenarios: {broker}", "",
                    "`compat-tests/test_matrix.py` (groups, retention and the `WITH META` database topic: walgate",
                    "only; walgate-cluster: 3 nodes, `skip` = run with WALGATE_COMPAT_LONG=1 only).",
                    ""] + table(matrix[broker], labels)
    for broker in ("walgate", "walgate-cluster", "tansu"):
        if other.get(broker):
            out += [f"## Further scenarios: {broker}", ""] + table(other[broker], ORDER)
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="source", type=Path, help="render an existing results file, run nothing")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = p.parse_args()
    code = 0
    if args.source is None:
        fd, name = tempfile.mkstemp(prefix="compat-", suffix=".jsonl")
        os.close(fd)
        args.source = Path(name)
        env = {**os.environ, "WALGATE_COMPAT_RESULTS": name, "WALGATE_PEERS": "1"}  # the peer's column too
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", str(ROOT / "compat-tests"), *args.pytest_args],
                              cwd=ROOT, env=env).returncode
    results = [json.loads(line) for line in args.source.read_text().splitlines() if line.strip()]
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(render(results) + "\n")
    print(f"wrote {OUT} ({len(results)} results)")
    return code


if __name__ == "__main__":
    sys.exit(main())
