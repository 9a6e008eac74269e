"""The etcd v3 client session the control plane talks through (``aetcd`` over gRPC, etcd 3.4's API).

:class:`EtcdSession` holds the cluster's client endpoints and talks to one at a time; a call that gets no answer
(the member is down, or cannot reach a quorum) within ``timeout`` raises :class:`ControlPlaneUnavailable` and the
next call goes to the next endpoint. Reads are retried once on every endpoint before giving up; writes are never
retried here (a write that timed out may still commit: the caller's fenced transaction decides on its next try).

:class:`EtcdAccess` is how the session reaches etcd: plaintext or TLS (a CA, and a client certificate for
``--client-cert-auth``), as an etcd user or not. A user's auth token is fetched when a channel opens; a call etcd
refuses for an invalid token (it expired, or etcd restarted and forgot it) opens a new channel, authenticates again
and is made once more (etcd refuses such a call before proposing it: nothing was applied). A call etcd refuses for
the user's name, password or permissions raises :class:`ControlPlaneRefused` at once: no endpoint would answer
better.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import aetcd
import aetcd.exceptions
import aetcd.rpc
import aetcd.rtypes
import aetcd.transactions as tx
import aetcd.watcher
import grpc  # type: ignore[import-untyped]  # grpcio ships no type information

from walgate.cluster.model import ControlPlaneRefused, ControlPlaneUnavailable, parse_endpoints

__all__ = ["EtcdAccess", "EtcdSession", "Compacted", "follow_prefix", "parse_endpoints", "tx"]

log = logging.getLogger("walgate.cluster")
T = TypeVar("T")


class Compacted(Exception):
    """A watch asked for a revision etcd has compacted away; ``revision`` is the oldest it still has."""

    def __init__(self, revision: int) -> None:
        super().__init__(f"etcd compacted its history below revision {revision}")
        self.revision = revision


_INVALID_TOKEN = "invalid auth token"
_REFUSALS = ("authentication failed", "user name is empty", "permission denied", "authentication is not enabled",
             "invalid auth management")
"""etcd 3.4's answers (rpctypes) to a call it refuses for who makes it: its user, password or permissions."""


@dataclass(frozen=True)
class EtcdAccess:
    """How a session reaches etcd. ``tls``: gRPC over TLS, verified against ``ca`` (PEM; None: the system's trust
    store), with the client certificate ``cert_chain`` and its unencrypted ``key`` (PEM) when given (both or
    neither); ``user`` and ``password``: an etcd user (both or neither)."""

    tls: bool = False
    ca: bytes | None = field(default=None, repr=False)
    cert_chain: bytes | None = field(default=None, repr=False)
    key: bytes | None = field(default=None, repr=False)
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.cert_chain is None) != (self.key is None):
            raise ValueError("an etcd client certificate and its key go together")
        if (self.user is None) != (self.password is None):
            raise ValueError("an etcd user and its password go together")
        if not self.tls and (self.ca is not None or self.cert_chain is not None):
            raise ValueError("a CA or client certificate for etcd needs https:// endpoints")


class _Client(aetcd.Client):  # type: ignore[misc]  # aetcd ships no type information
    """aetcd 1.0.0's client over a TLS channel when ``access.tls``: its own ``connect`` opens plaintext channels
    only, so this ``connect`` opens a TLS one and then does what aetcd's does (authenticate when a user is given,
    make the stubs and the watcher; the attributes are aetcd 1.0.0's, pinned in pyproject.toml)."""

    _is_connecting: bool  # aetcd's: a task is opening the channel

    def __init__(self, host: str, port: int, timeout: float, access: EtcdAccess) -> None:
        super().__init__(host=host, port=port, username=access.user, password=access.password, timeout=timeout)
        self._credentials = grpc.ssl_channel_credentials(access.ca, access.key, access.cert_chain) if access.tls else None

    async def connect(self) -> None:
        if self._credentials is None:
            await super().connect()
            return
        if self._connected.is_set():
            return
        if self._is_connecting:  # another task is opening the channel
            async with asyncio.timeout(self._connect_wait_timeout):
                await self._connected.wait()
            return
        self._is_connecting = True
        try:
            self.channel = grpc.aio.secure_channel(f"{self._host}:{self._port}", self._credentials)
            if self._username is not None:
                request = aetcd.rpc.AuthenticateRequest(name=self._username, password=self._password)
                reply = await aetcd.rpc.AuthStub(self.channel).Authenticate(request, timeout=self._timeout)
                self.metadata = (("token", reply.token),)
            self.kvstub = aetcd.rpc.KVStub(self.channel)
            self.clusterstub = aetcd.rpc.ClusterStub(self.channel)
            self.leasestub = aetcd.rpc.LeaseStub(self.channel)
            self.maintenancestub = aetcd.rpc.MaintenanceStub(self.channel)
            self._watcher = aetcd.watcher.Watcher(aetcd.rpc.WatchStub(self.channel), timeout=self._timeout,
                                                  metadata=self.metadata)
            self._connected.set()
        except grpc.aio.AioRpcError as e:
            aetcd.exceptions._handle_exception(e)  # as aetcd 1.0.0's own calls: its ClientError kinds
        finally:
            self._is_connecting = False


def _cancelled() -> bool:
    """Whether the running task is being cancelled. A gRPC call whose channel another task closed (rotating to the
    next endpoint) raises CancelledError too: that one is a failed call, not a cancellation."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class EtcdSession:
    """One client session over the endpoints of one etcd cluster, reached as ``access`` says (default: plaintext,
    no user); ``timeout`` (seconds) bounds every call."""

    def __init__(self, endpoints: list[tuple[str, int]], timeout: float = 5.0, access: EtcdAccess | None = None
                 ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint given")
        self.endpoints = endpoints
        self.timeout = timeout
        self.access = access or EtcdAccess()
        self._current = 0
        self._client: aetcd.Client | None = None

    def describe(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.endpoints)

    def _get_client(self) -> aetcd.Client:
        if self._client is None:
            host, port = self.endpoints[self._current]
            self._client = _Client(host, port, self.timeout, self.access)
        return self._client

    async def _rotate(self, failed: aetcd.Client) -> None:
        """Move to the next endpoint after a call on client ``failed`` failed; nothing when another task did so
        already (every in-flight call of a dead member fails at once: one rotation, not one each)."""
        if self._client is failed:
            self._current = (self._current + 1) % len(self.endpoints)
        await self._drop(failed)

    async def _drop(self, failed: aetcd.Client) -> None:
        """Close client ``failed`` (the next call opens a new channel); nothing when another task did so already."""
        current = self._client
        if current is None or current is not failed:
            return
        self._client = None
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
        reauthenticated = False
        while attempts > 0:
            attempts -= 1
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
                refusal = str(e) if isinstance(e, aetcd.exceptions.ClientError) else ""
                if _INVALID_TOKEN in refusal and not reauthenticated:  # refused before it was proposed: try again
                    log.info("etcd %s:%d: the auth token is no longer valid: authenticating again", host, port)
                    reauthenticated, attempts = True, attempts + 1
                    await self._drop(client)
                    continue
                if any(text in refusal for text in _REFUSALS):
                    user = f"etcd user {self.access.user!r}" if self.access.user is not None else "no etcd user"
                    raise ControlPlaneRefused(f"etcd {host}:{port} refused {what} ({user}): {refusal}") from None
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

    async def read_at_once(self, gets: list[Any]) -> list[Any]:
        """The responses of ``gets`` (``tx.Get`` operations only), read in one transaction, so at one revision; a
        read, tried on each endpoint in turn."""
        _, responses = await self._call("a read", lambda c: c.transaction([], gets, []), retry=True)
        return list(responses)

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


async def follow_prefix(session: EtcdSession, prefix: bytes, *, start: Callable[[], int],
                        read: Callable[[], Awaitable[None]],
                        on_event: Callable[[aetcd.rtypes.Event], Awaitable[None]], what: str,
                        retry_delay: float, read_again: tuple[type[Exception], ...] = (),
                        reread_s: float | None = None) -> NoReturn:
    """Follow ``prefix`` until cancelled, the caller keeping its place: ``start()`` is the revision its next watch
    of ``prefix`` starts at (0: nothing read yet), ``read()`` reads what it follows at one revision and moves
    ``start()`` there, ``on_event(event)`` handles the watch's events one at a time in revision order (and may move
    ``start()`` past each). The rules, the same for every follower:

    * nothing read yet: read first, then watch from ``start()``;
    * etcd compacted the history ``start()`` needs (:class:`Compacted`), or ``on_event`` raised one of
      ``read_again`` (the caller found it missed something): read again at once, then watch;
    * a watch that ran ``reread_s`` seconds (when given): ended, read again, then watched anew, so that a change
      the watch never delivered (an event lost between etcd and here) is taken within that time, never missed for
      as long as the key does not change again;
    * the stream broke or etcd did not answer (:class:`ControlPlaneUnavailable`, logged at WARNING): wait
      ``retry_delay`` seconds, then resume the watch from ``start()`` (reading first if nothing was read yet).

    Anything else ``read`` or ``on_event`` raises ends the following and propagates. The watch is cancelled before
    each read: no event of it is handled after a read at a later revision."""
    stale: tuple[type[Exception], ...] = (Compacted, *read_again)
    must_read = start() == 0
    while True:
        try:
            if must_read:
                await read()
                must_read = False
            watch = await session.watch_prefix(prefix, start())
            due = asyncio.timeout(reread_s)
            try:
                iterator = watch.__aiter__()
                async with due:
                    while True:
                        await on_event(await session.next_event(iterator))
            except TimeoutError:
                if not due.expired():
                    raise
                must_read = True
            finally:
                await session.cancel_watch(watch)
        except stale as e:
            log.info("%s: %s at revision %d; reading again", what, e, start())
            must_read = True
        except ControlPlaneUnavailable as e:
            log.warning("%s: following from revision %d interrupted: %s", what, start(), e)
            await asyncio.sleep(retry_delay)
            must_read = must_read or start() == 0
