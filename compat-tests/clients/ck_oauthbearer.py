"""Log in with confluent-kafka (librdkafka) over SASL_PLAINTEXT with OAUTHBEARER, produce one record to partition 0
and read it back. The token comes from ``oauth_cb``, which returns the signed JWT of TOKEN_FILE and its expiry (the
token's ``exp``; when that is no number an int64 of microseconds holds (1e20, Infinity, ...), an hour from now,
which librdkafka needs to accept the token at all: the broker judges the claim itself).

Usage: ck_oauthbearer.py BOOTSTRAP TOPIC TOKEN_FILE

Prints one JSON line: ``{"event": "ok", "value": <the value read back>}``, or, when the broker refuses the token,
``{"event": "error", "name": <librdkafka's error name>, "message": ...}``; exit code 0 either way (a hang is the
test's timeout). The token is never printed.
"""

from __future__ import annotations

import base64
import json
import math
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

_MAX_EXPIRY_S = 2**63 / 1e6  # seconds: an int64 holds them in ms and in µs, whichever the binding uses


def emit(**event: object) -> None:
    print(json.dumps(event), flush=True)


def token_callback(path: Path) -> Any:
    def oauth_cb(_config: str) -> tuple[str, float]:
        token = path.read_text().strip()
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = claims["exp"]
        if not (isinstance(exp, (int, float)) and math.isfinite(exp) and 0 <= exp < _MAX_EXPIRY_S):
            exp = time.time() + 3600
        return token, float(exp)  # librdkafka: (token, expiry in seconds since the epoch)

    return oauth_cb


def main() -> None:
    bootstrap, topic, token_file = sys.argv[1:4]
    value = f"hello from confluent-kafka over OAUTHBEARER {uuid.uuid4()}"
    errors: list[KafkaError] = []
    common = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
              "oauth_cb": token_callback(Path(token_file)), "error_cb": errors.append}
    try:
        producer = Producer(common)
        producer.produce(topic, value.encode(), partition=0)
        deadline = time.monotonic() + 15
        while len(producer) and time.monotonic() < deadline:  # delivered, or refused: error_cb says so
            producer.poll(0.1)
            auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
            if auth:
                raise KafkaException(auth[0])
        assert not len(producer), f"undelivered: {errors}"
    except KafkaException as exc:
        emit(event="error", name=exc.args[0].name(), message=str(exc))
        return
    consumer = Consumer({**common, "group.id": f"oauth-{uuid.uuid4()}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        while True:
            msg = consumer.poll(15)
            assert msg is not None, "no record within 15 s"
            if msg.error() is None and msg.value().decode() == value:
                break
    finally:
        consumer.close()
    emit(event="ok", value=value)


if __name__ == "__main__":
    main()
