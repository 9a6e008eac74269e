"""ApiVersions (key 18) v0–v4: what this broker handles, derived from the handler table, and (v3+) its features.

An ApiVersions request of a version above this range never reaches here: the
server answers it with the KIP-511 v0 fallback (UNSUPPORTED_VERSION + the list).

Features (KIP-584), as a Kafka 4 broker answers them: ``transaction.version`` is supported from 0 to 2 (listed from v4:
v3 omits features whose minimum is 0) and finalized at the node's ``transaction.version`` setting (absent at 0, as
Kafka leaves a disabled feature out). A kafka-clients 4.x producer runs transaction version 2 (KIP-890 part 2:
Produce v12, EndTxn v5, TxnOffsetCommit v5, no AddPartitionsToTxn / AddOffsetsToTxn) when it finds it finalized at 2 or
more. The finalized features' epoch is the time this process started, in ms: clients only take features of an epoch
above the one they saw, so a restart with another level reaches connected clients too. A node without a transaction
coordinator has no features.
"""

from __future__ import annotations

import time
from typing import Final

from walgate.coordinator.transactions import TRANSACTION_VERSIONS
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.wire.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ApiVersionsResponseSupportedFeatureKey,
)

API_KEY, MIN_VERSION, MAX_VERSION = 18, 0, 4
_FEATURES_SINCE = 3
_FEATURES_EPOCH: Final = int(time.time() * 1000)


def _add_features(answer: ApiVersionsResponse, broker: Broker, version: int) -> None:
    svc = broker.transactions
    if version < _FEATURES_SINCE or svc is None:
        return
    low, high = TRANSACTION_VERSIONS
    level = svc.coordinator.transaction_version
    supported: list[ApiVersionsResponseSupportedFeatureKey] = [
        {"name": "transaction.version", "min_version": low, "max_version": high}]
    answer["supported_features"] = supported if version >= 4 or low > 0 else []
    answer["finalized_features_epoch"] = _FEATURES_EPOCH
    answer["finalized_features"] = [{"name": "transaction.version", "max_version_level": level,
                                     "min_version_level": level}] if level > 0 else []


async def handle(broker: Broker, ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    answer: ApiVersionsResponse = {
        "error_code": 0,
        "throttle_time": 0,
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi} for key, (lo, hi) in sorted(broker.versions.items())
        ],
    }
    _add_features(answer, broker, ctx.api_version)
    return answer
