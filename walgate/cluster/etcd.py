"""The etcd v3 client session the control plane talks through (``aetcd`` over gRPC, etcd 3.4's API).

:class:`EtcdSession` holds the cluster's client endpoints and talks to one at a time; a call that gets no answer
(the member is down, or cannot reach a quorum) within ``timeout`` raises :class:`ControlPlaneUnavailable` and the
next call goes to the next endpoint. Reads are retried once on every endpoint before giving up; writes are never
retried here (a write that timed out may still commit: the caller's fenced transaction decides on its next try).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aetcd
import aetcd.exceptions
import aetcd.rtypes
import aetcd.transactions as tx

from walgate.cluster.model import ControlPlaneUnavailable, parse_endpoints

__all__ = ["EtcdSession", "Compacted", "parse_endpoints", "tx"]

log = logging.getLogger("walgate.cluster")
T = TypeVar("T")


class Compacted(Exception):
    """A watch asked for a revision etcd has compacted away; ``revision`` is the oldest it still has."""

    def __init__(self, revision: int) -> None:
        super().__init__(f"etcd compacted its history below revision {revision}")
        self.revision = revision


def _cancelled() -> bool:
    """Whether the running task is being cancelled. A gRPC call whose channel another task closed (rotating to the
    next endpoint) raises CancelledError too: that one is a failed call, not a cancellation."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class EtcdSession:
    """One client session over the endpoints of one etcd cluster; ``timeout`` (seconds) bounds every call."""

    def __init__(self, endpoints: list[tuple[str, int]], timeout: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint given")
        self.endpoints = endpoints
        self.timeout = timeout
        self._current = 0
        self._client: aetcd.Client | None = None

    def describe(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.endpoints)

    def _get_client(self) -> aetcd.Client:
        if self._client is None:
            host, port = self.endpoints[self._current]
            self._client = aetcd.Client(host=host, port=port, timeout=self.timeout)
        return self._client

    async def _rotate(self, failed: aetcd.Client) -> None:
        """Move to the next endpoint after a call on client ``failed`` failed; nothing when another task did so
        already (every in-flight call of a dead member fails at once: one rotation, not one each)."""
        current = self._client
        if current is None or current is not failed:
            return
        self._client = None
        self._current = (self._current + 1) % len(self.endpoints)
        try:
            async with asyncio.timeout(self.timeout):
                await current.close()
        except (Exception, TimeoutError) as e:  # closing a broken channel: nothing left to do
            log.debug("closing the etcd channel: %r", e)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            async with asyncio.timeout(self.timeout):
                await client.close()

    async def _call(self, what: str, fn: Callable[[aetcd.Client], Awaitable[T]], *, retry: bool) -> T:
        attempts = len(self.endpoints) if retry else 1
        last: BaseException | None = None
        for _ in range(attempts):
            host, port = self.endpoints[self._current]
            client = self._get_client()
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that meets a result
                async with asyncio.timeout(self.timeout):
                    return await fn(client)
            except aetcd.exceptions.RevisionCompactedError as e:
                raise Compacted(e.compacted_revision) from e
            except (TimeoutError, aetcd.exceptions.ClientError, asyncio.CancelledError) as e:
                if isinstance(e, asyncio.CancelledError) and _cancelled():
                    raise
                last = e
                log.warning("etcd %s:%d: %s failed: %s", host, port, what, str(e) or type(e).__name__)
                await self._rotate(client)
        raise ControlPlaneUnavailable(
            f"etcd ({self.describe()}) did not answer {what} within {self.timeout:g} s"
            f" ({str(last) or type(last).__name__}): no member reachable or no quorum"
            + ("" if retry else "; the write may still be applied once etcd has a quorum again")) from last

    async def get(self, key: bytes) -> aetcd.rtypes.Get | None:
        return await self._call("a read", lambda c: c.get(key), retry=True)

    async def get_prefix(self, prefix: bytes) -> tuple[int, list[aetcd.rtypes.KeyValue]]:
        """(the revision read at, every key under ``prefix`` in key order)."""
        result = await self._call("a read", lambda c: c.get_prefix(prefix, sort_order="ascend"), retry=True)
        return int(result.header.revision), list(result)

    async def txn(self, compare: list[Any], success: list[Any], failure: list[Any] | None = None
                  ) -> tuple[bool, list[Any]]:
        """A transaction: (whether every compare held, the responses of the operations run)."""
        return await self._call("a write", lambda c: c.transaction(compare, success, failure or []), retry=False)

    async def grant(self, ttl: int) -> int:
        lease = await self._call("a lease grant", lambda c: c.lease(ttl), retry=False)
        return int(lease.id)

    async def keepalive(self, lease_id: int) -> int:
        """Refresh a lease; its remaining TTL in seconds (0 or less: the lease has expired)."""
        reply = await self._call("a lease keep-alive", lambda c: c.refresh_lease(lease_id), retry=True)
        return int(reply.TTL) if reply is not None else 0

    async def revoke(self, lease_id: int) -> None:
        """Revoke a lease (its keys are deleted); a lease already gone is fine."""

        async def run(c: aetcd.Client) -> None:
            try:
                await c.revoke_lease(lease_id)
            except aetcd.exceptions.ClientError as e:
                if "lease not found" not in str(e):
                    raise

        await self._call("a lease revoke", run, retry=False)

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> Any:
        """An ``aetcd`` watch of ``prefix`` from ``start_revision``: iterate it with :meth:`next_event`."""
        return await self._call("a watch", lambda c: c.watch_prefix(prefix, start_revision=start_revision),
                                retry=True)

    async def cancel_watch(self, watch: Any) -> None:
        """Cancel a watch (best effort: a broken stream has nothing left to cancel)."""
        try:
            async with asyncio.timeout(self.timeout):
                await watch.cancel()
        except (Exception, TimeoutError) as e:
            log.debug("cancelling a watch: %r", e)

    async def next_event(self, iterator: Any) -> aetcd.rtypes.Event:
        """The next event of a watch's iterator (no time limit: a quiet stream is not an error). A broken stream
        raises :class:`ControlPlaneUnavailable`, a compacted start :class:`Compacted`."""
        host, port = self.endpoints[self._current]
        try:
            event: aetcd.rtypes.Event = await iterator.__anext__()
            return event
        except aetcd.exceptions.RevisionCompactedError as e:
            raise Compacted(e.compacted_revision) from e
        except StopAsyncIteration as e:
            raise ControlPlaneUnavailable(f"etcd {host}:{port}: the watch stream ended") from e
        except (TimeoutError, aetcd.exceptions.ClientError, asyncio.CancelledError) as e:
            if isinstance(e, asyncio.CancelledError) and _cancelled():
                raise
            # the next call finds out whether the member is up
            raise ControlPlaneUnavailable(f"etcd {host}:{port}: the watch stream broke: {e}") from e
