"""The partition states in etcd and the controller's reconciliation (issue 25, step 3): the codec and the batching
(pure, seeded), then real etcd with in-process nodes: failover from the ISR, KIP-903's fencing of a re-registered
replica, a leader's refused ISR proposals, a zombie controller, etcd losing its majority, and the states of the
catalog's replicated vgroups that partitions/ lacks created (step 2: the catalog record is the truth)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cluster_support import KEYS, Node, create_states, eventually, within
from etcd_cluster import EtcdCluster, etcd_cluster
from event_process import EventProcess

from tests.replication.reached_states import reached_state
from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import ControlPlaneUnavailable, NotController
from walgate.cluster.partition_codec import (
    MAX_STATES_PER_TXN,
    CatalogVnodes,
    PartitionId,
    PartitionStateDamaged,
    ReplicatedVnode,
    batches,
    decode_state,
    encode_state,
    missing_states,
    partition_id,
    partition_key,
    reconcile_all,
)
from walgate.cluster.partition_states import PartitionStates, Reconciler
from walgate.cluster.registry import broker_epoch
from walgate.replication.partition import (
    NO_LEADER,
    AlterIsr,
    IsrMember,
    PartitionState,
    initial_state,
)
from walgate.storage.catalog import DB_DEFAULTS, Catalog
from walgate.storage.names import new_db_id
from walgate.wire.errors import ErrorCode


def test_the_codec_round_trips_and_refuses_damage_clearly() -> None:
    rng = random.Random(25)
    for _ in range(150):
        state, _, _ = reached_state(rng)
        value = encode_state(state)
        assert decode_state(value, state.partition_epoch) == state
        for cut in range(len(value)):  # truncation: damaged or (never here) another valid state, nothing else
            with pytest.raises(PartitionStateDamaged):
                decode_state(value[:cut], 7)
        for _ in range(20):
            at = rng.randrange(len(value))
            flipped = value[:at] + bytes([value[at] ^ (1 << rng.randrange(8))]) + value[at + 1:]
            try:
                again = decode_state(flipped, 7)
            except PartitionStateDamaged:
                continue
            assert decode_state(encode_state(again), 7) == again  # a flip that still reads is a whole valid state
    good = json.loads(encode_state(initial_state((1, 2, 3), {1: 5, 2: 6, 3: 7}, 2)))
    for broken, why in [({"leader": 9}, "leader not in the ISR"), ({"isr": [[1, 5], [4, 1]]}, "not a replica"),
                        ({"elr": [1]}, "in the ISR"), ({"replicas": [1, 1, 2]}, "replicas repeated"),
                        ({"min_isr": 4}, "min_isr"), ({"leader_epoch": "0"}, "not an integer"),
                        ({"unclean": 0}, "not a boolean"), ({"isr": [[1]]}, "replica, broker epoch")]:
        with pytest.raises(PartitionStateDamaged, match=why):
            decode_state(json.dumps(good | broken).encode(), 3)
    with pytest.raises(PartitionStateDamaged, match="not walgate's"):
        decode_state(b'["a list"]', 3)
    pid = PartitionId("3f0c9a", 4)
    assert partition_id(KEYS, partition_key(KEYS, pid)) == pid
    for key in (KEYS.root + b"partitions/db", KEYS.root + b"partitions/db/x", KEYS.root + b"nodes/1",
                KEYS.root + b"partitions/db/007", KEYS.root + b"partitions/db/00"):  # one vnode, one key
        with pytest.raises(PartitionStateDamaged, match="not a partition state's key"):
            partition_id(KEYS, key)


def test_reconciliation_of_many_partitions_is_cut_into_transactions_of_at_most_60() -> None:
    rng = random.Random(3)
    registered = {1: 10, 2: 11, 3: 12}
    states = {PartitionId(f"db{i % 3}", i): initial_state(tuple(rng.sample((1, 2, 3), 3)), registered, 2)
              for i in range(157)}
    assert reconcile_all(states, registered) == {}
    changes = reconcile_all(states, {2: 11, 3: 12})  # node 1 gone: every ISR shrinks, its leaderships move
    assert set(changes) == set(states)
    assert all(s.leader in (2, 3) and 1 not in s.isr_ids for s in changes.values())
    cut = list(batches(changes))
    assert [len(b) for b in cut] == [60, 60, 37] and MAX_STATES_PER_TXN == 60
    assert [pid for b in cut for pid in b] == sorted(changes)


def test_a_vgroup_none_of_whose_replicas_is_registered_gets_its_state_once_one_registers() -> None:
    """No state is created while every replica of the vgroup is unregistered (a leaderless state with an empty ISR
    could never elect: Kafka refuses to create a partition on fenced brokers); the first pass after one registers
    creates it with that one leading, at its broker epoch."""
    catalog = {PartitionId("a", 0): ReplicatedVnode((2, 3), 1), PartitionId("b", 0): ReplicatedVnode((1, 2), 1)}
    states, refused = missing_states(catalog, (), {1: 5}, 40)
    assert set(states) == {PartitionId("b", 0)} and refused == {}
    states, refused = missing_states(catalog, {PartitionId("b", 0)}, {1: 5, 3: 7}, 41)
    assert states == {PartitionId("a", 0): initial_state((2, 3), {3: 7}, 1, leader_epoch=41)} and refused == {}
    assert states[PartitionId("a", 0)].leader == 3 and states[PartitionId("a", 0)].isr == (IsrMember(3, 7),)


def _start(node: Node) -> Reconciler:
    """Registration, election and reconciliation of ``node`` as running tasks."""
    reconciler = Reconciler(PartitionStates(node.session, KEYS), node.election, retry_delay=0.2)
    node.start("registration", "election")
    node.tasks.append(asyncio.create_task(reconciler.run()))
    return reconciler


async def _controller(nodes: list[Node]) -> Node:
    async def elected() -> bool:
        return any(n.election.epoch is not None for n in nodes)

    await eventually("a controller", elected)
    return next(n for n in nodes if n.election.epoch is not None)


async def _until(view: PartitionStates, pid: PartitionId, what: str, check: object) -> PartitionState:
    found: list[PartitionState] = []

    async def holds() -> bool:
        state = await view.read(pid)
        if state is not None and check(state):  # type: ignore[operator]
            found.append(state)
            return True
        return False

    await eventually(what, holds)
    return found[-1]


async def test_a_leader_s_registration_ending_elects_a_new_leader_from_the_isr(etcd1: EtcdCluster,
                                                                               tmp_path: Path) -> None:
    nodes = [Node(etcd1.endpoints, i, tmp_path / f"n{i}", ttl=2) for i in (1, 2, 3)]
    try:
        for n in nodes:
            _start(n)
        await eventually("all registered", lambda: _all_registered(nodes))
        epochs = {n.info.node_id: n.registration.epoch or 0 for n in nodes}
        led_by_1 = {PartitionId("d1", v): initial_state((1, 2, 3), epochs, 2) for v in range(130)}
        led_by_2 = {PartitionId("d2", v): initial_state((2, 3, 1), epochs, 2) for v in range(5)}
        follower = PartitionStates(nodes[2].session, KEYS)  # what every node does: read, then watch
        seen: list[tuple[PartitionId, PartitionState | None]] = []
        nodes[2].tasks.append(asyncio.create_task(follower.follow(lambda pid, s: seen.append((pid, s)))))
        await eventually("the follower read", lambda: _following(follower))
        await create_states(await _controller(nodes), led_by_1 | led_by_2)
        view = PartitionStates(nodes[1].session, KEYS)
        await nodes[0].close()  # its lease revoked: nodes/1 goes, and its candidacy if it was the controller

        async def all_moved() -> bool:
            states = await view.read_all()
            return len(states) == 135 and all(1 not in s.isr_ids and s.leader == 2 for s in states.values())

        await eventually("every partition led by node 2, node 1 out of every ISR", all_moved)
        states = view.states
        for pid in led_by_1:
            assert states[pid].leader == 2 and states[pid].leader_epoch == 1, states[pid]
            assert states[pid].isr == (IsrMember(2, epochs[2]), IsrMember(3, epochs[3])) and states[pid].elr == ()
        for pid in led_by_2:
            assert states[pid].leader == 2 and states[pid].leader_epoch == 0 and 1 not in states[pid].isr_ids
        await eventually("the follower saw it all", lambda: _same(follower, view))
        assert [pid for pid, _ in seen] == sorted(led_by_1 | led_by_2) * 2  # created, then changed: once each
        per_txn = Counter(s.partition_epoch for s in states.values())  # one etcd revision per transaction
        assert max(per_txn.values()) <= MAX_STATES_PER_TXN and len(per_txn) >= 3
        # a watch that broke halfway through one transaction's events resumes with the rest of them, once each
        resumed = PartitionStates(nodes[2].session, KEYS)
        await resumed.read_all()
        last_txn = max(per_txn)
        unseen = sorted(pid for pid, s in resumed.states.items() if s.partition_epoch == last_txn)[per_txn[last_txn] // 2:]
        for pid in unseen:
            del resumed.states[pid]
        resumed.revision = last_txn
        reported: list[PartitionId] = []
        nodes[2].tasks.append(asyncio.create_task(resumed.follow(lambda pid, s: reported.append(pid))))
        await eventually("the rest of the transaction", lambda: _same(resumed, view))
        assert reported == unseen
    finally:
        for n in nodes:
            await n.close()


async def test_a_change_the_watch_never_delivered_is_taken_from_the_next_read_and_logged(
        etcd1: EtcdCluster, caplog: pytest.LogCaptureFixture) -> None:
    """A node's watch of the partition states runs ``reread_s`` at most, then they are read again: a change whose
    event was lost on the way (dropped here) is reported all the same, and named at WARNING (its revision is below
    what the watch had reached, so it was missed, not in flight)."""
    session = EtcdSession(etcd1.endpoints)
    follower = PartitionStates(session, KEYS)
    lost, other = PartitionId("d1", 0), PartitionId("d1", 1)
    seen: list[tuple[PartitionId, PartitionState | None]] = []
    take = follower._seen

    def dropping_one(event: Any, on_change: Any) -> None:
        if partition_id(KEYS, event.kv.key) == lost and not any(pid == lost for pid, _ in seen):
            return  # as if etcd or the client never delivered it
        take(event, on_change)

    follower._seen = dropping_one  # type: ignore[method-assign]
    task = asyncio.create_task(follower.follow(lambda pid, s: seen.append((pid, s)), reread_s=1.0))
    try:
        await eventually("the follower read", lambda: _following(follower))
        state = initial_state((1, 2, 3), {1: 1, 2: 2, 3: 3}, 2)
        await session.txn([], [tx.Put(partition_key(KEYS, lost), encode_state(state))])
        await session.txn([], [tx.Put(partition_key(KEYS, other), encode_state(state))])
        await eventually("both changes reported", lambda: _is({pid for pid, _ in seen} == {lost, other}))
        assert [pid for pid, _ in seen] == [other, lost]  # the lost one from the read, after the later event
        assert follower.states[lost].isr_ids == {1, 2, 3}
        assert [r.levelname for r in caplog.records if "never delivered by the watch" in r.message] == ["WARNING"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await session.close()


async def test_a_re_registered_replica_is_fenced_and_never_elected_and_stale_proposals_are_refused(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    """KIP-903 (a broker back under a new broker epoch leaves the ISR and is not elected from it) and KIP-497 (a
    leader's ISR change compares the partition epoch it read and its own registration: a deposed leader whose
    registration ended is STALE_BROKER_EPOCH)."""
    n1, n2, n3 = nodes = [Node(etcd1.endpoints, i, tmp_path / f"n{i}", ttl=2) for i in (1, 2, 3)]
    pid = PartitionId("d", 0)
    restarted = Node(etcd1.endpoints, 3, tmp_path / "n3", ttl=2)  # node 3's next process, on the same data dir
    try:
        for n in nodes:
            _start(n)
        await eventually("all registered", lambda: _all_registered(nodes))
        epochs = {n.info.node_id: n.registration.epoch or 0 for n in nodes}
        await create_states(await _controller(nodes), {pid: initial_state((1, 2, 3), epochs, 2)})
        view = PartitionStates(n1.session, KEYS)
        await n3.close()  # node 3's process dies; its lease is still live
        _start(restarted)  # it restarts: its registration replaces the old one under a new broker epoch
        s1 = await _until(view, pid, "node 3 fenced out of the ISR", lambda s: 3 not in s.isr_ids)
        assert s1.leader == 1 and s1.leader_epoch == 0 and s1.isr == (IsrMember(1, epochs[1]), IsrMember(2, epochs[2]))
        await eventually("node 3 registered again", lambda: _registered_again(restarted, epochs[3]))
        back = {1: epochs[1], 2: epochs[2], 3: epochs[3]}  # the leader's view of node 3 is its old registration
        out = await view.alter_isr(s1, pid, AlterIsr(1, 0, s1.partition_epoch, (*s1.isr, IsrMember(3, epochs[3])),
                                                           epochs[1]), back)
        assert out.error == ErrorCode.ineligible_replica and out.state == s1  # nodes/3's epoch was read
        shrink = AlterIsr(1, 0, s1.partition_epoch, (IsrMember(1, epochs[1]),), epochs[1])
        s2 = (await view.alter_isr(s1, pid, shrink, back)).state
        assert s2 is not None and s2.isr_ids == {1} and s2.elr == (2,) and s2.partition_epoch > s1.partition_epoch
        stale = await view.alter_isr(s1, pid, shrink, back)  # the same proposal from the state it no longer is
        assert stale.error == ErrorCode.invalid_update_version and stale.state == s2
        s3 = (await view.alter_isr(s2, pid, AlterIsr(1, 0, s2.partition_epoch, s1.isr, epochs[1]), back)).state
        assert s3 is not None and s3.isr == s1.isr and s3.elr == ()
        await n1.close()
        s4 = await _until(view, pid, "node 2 elected", lambda s: s.leader == 2)
        assert s4.leader_epoch == 1 and s4.isr == (IsrMember(2, epochs[2]),) and s4.elr == (1,)
        deposed = await PartitionStates(n2.session, KEYS).alter_isr(s3, pid, AlterIsr(1, 0, s3.partition_epoch,
                                                                                      s1.isr, epochs[1]), back)
        assert deposed.error == ErrorCode.stale_broker_epoch and deposed.state == s3  # nodes/1 is gone: no write
        await n2.close()
        view = PartitionStates(restarted.session, KEYS)
        s5 = await _until(view, pid, "no leader", lambda s: s.leader == NO_LEADER)
        assert s5.isr == () and s5.elr == (1, 2) and s5.leader_epoch == 2  # node 3 is live, and not eligible
        revision = (await restarted.session.get(partition_key(KEYS, pid)))
        assert revision is not None and revision.mod_revision == s5.partition_epoch
    finally:
        for n in (*nodes, restarted):
            await n.close()


async def test_a_node_in_a_controlled_shutdown_stays_registered_loses_its_leaderships_and_joins_no_isr(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    """KIP-631: a registration marked shutting down is reconciled as fenced (its leaderships move to in-sync
    replicas, it leaves every ISR) while ``nodes/<id>`` stays; a leader's proposal to admit it again is
    INELIGIBLE_REPLICA (KIP-841)."""
    n1, n2, n3 = nodes = [Node(etcd1.endpoints, i, tmp_path / f"n{i}", ttl=2) for i in (1, 2, 3)]
    led_by_1, led_by_2 = PartitionId("d", 0), PartitionId("d", 1)
    try:
        for n in nodes:
            _start(n)
        await eventually("all registered", lambda: _all_registered(nodes))
        epochs = {n.info.node_id: n.registration.epoch or 0 for n in nodes}
        await create_states(await _controller(nodes), {led_by_1: initial_state((1, 2, 3), epochs, 2),
                                                       led_by_2: initial_state((2, 1, 3), epochs, 2)})
        view = PartitionStates(n2.session, KEYS)
        assert await n1.registration.shut_down()
        moved = await _until(view, led_by_1, "node 2 elected", lambda s: s.leader == 2)
        assert moved.leader_epoch == 1 and moved.isr == (IsrMember(2, epochs[2]), IsrMember(3, epochs[3]))
        kept = await _until(view, led_by_2, "node 1 out of the ISR", lambda s: 1 not in s.isr_ids)
        assert kept.leader == 2 and kept.leader_epoch == 0 and kept.isr_ids == {2, 3}
        registration = await n2.session.get(KEYS.node(1))
        assert registration is not None and registration.lease == n1.registration.lease_id, "still registered"
        back = await view.alter_isr(moved, led_by_1, AlterIsr(2, 1, moved.partition_epoch,
                                                              (*moved.isr, IsrMember(1, epochs[1])), epochs[2]),
                                    epochs)
        assert back.error == ErrorCode.ineligible_replica and back.state == moved
        await n1.close()  # deregistered: nothing left to change
        await eventually("node 1 deregistered", lambda: _absent(n2, KEYS.node(1)))
        assert await view.read(led_by_1) == moved and await view.read(led_by_2) == kept
    finally:
        for n in nodes:
            await n.close()


async def test_a_paused_process_keeps_its_broker_epoch_and_a_restarted_one_does_not(etcd1: EtcdCluster,
                                                                                   tmp_path: Path) -> None:
    """KIP-903 with a real node process: SIGSTOP past its lease's TTL fences it (not live: out of the ISR), and after
    SIGCONT it registers again under the same broker epoch, so it rejoins the ISR under that epoch and the
    controller leaves it there; kill -9 and a restart on the same data dir is a new epoch: fenced out again."""
    controller = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=2)
    helpers: list[EventProcess] = []
    pid = PartitionId("d", 0)

    def start_node_2() -> EventProcess:
        helpers.append(EventProcess("node 2", "node_helper.py", [etcd1.spec, KEYS.cluster_id, "2",
                                                                 str(tmp_path / "n2"), "2"],
                                    tmp_path / f"n2.{len(helpers)}.log"))
        return helpers[-1]

    async def registered(proc: EventProcess) -> int:
        event = await asyncio.to_thread(proc.wait, lambda e: e["event"] == "registered", "registration")
        return int(event["epoch"])

    try:
        controller.start("registration", "election")
        await within(controller.election.wait_elected())
        reconciler = Reconciler(PartitionStates(controller.session, KEYS), controller.election)
        view = reconciler.states
        node_2 = start_node_2()
        epochs = {1: controller.registration.epoch or 0, 2: await registered(node_2)}
        await create_states(controller, {pid: initial_state((1, 2), epochs, 1)})
        first = await controller.session.get(KEYS.node(2))
        assert first is not None
        node_2.signal(signal.SIGSTOP)
        await eventually("node 2's lease expired", lambda: _absent(controller, KEYS.node(2)))
        await reconciler.reconcile_once()
        fenced = await view.read(pid)
        assert fenced is not None and fenced.isr == (IsrMember(1, epochs[1]),)
        node_2.signal(signal.SIGCONT)
        await eventually("node 2 registered again", lambda: _present(controller, KEYS.node(2)))
        again = await controller.session.get(KEYS.node(2))
        assert again is not None and again.lease != first.lease
        assert broker_epoch(again.value, again.create_revision) == epochs[2] < again.create_revision
        # the leader adds it back under the epoch it had (on its fetches): accepted, and kept by the controller
        rejoin = AlterIsr(1, fenced.leader_epoch, fenced.partition_epoch, (*fenced.isr, IsrMember(2, epochs[2])),
                          epochs[1])
        out = await view.alter_isr(fenced, pid, rejoin, epochs)
        assert out.error is None and out.state is not None and out.state.isr_ids == {1, 2}
        await reconciler.reconcile_once()
        assert await view.read(pid) == out.state
        node_2.signal(signal.SIGKILL)
        node_2.stop()
        restarted = await registered(start_node_2())
        assert restarted > again.create_revision
        await reconciler.reconcile_once()
        state = await view.read(pid)
        assert state is not None and state.isr == (IsrMember(1, epochs[1]),)
        stale = AlterIsr(1, state.leader_epoch, state.partition_epoch, (*state.isr, IsrMember(2, epochs[2])), epochs[1])
        assert (await view.alter_isr(state, pid, stale, epochs)).error == ErrorCode.ineligible_replica
        assert all("Traceback" not in h.log() for h in helpers)
    finally:
        for h in helpers:
            h.stop()
        await controller.close()


async def test_a_replaced_controller_writes_no_partition_state(etcd1: EtcdCluster, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """And a damaged value or key under partitions/ is reported and left out, and the controller goes on."""
    old = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=2)
    new = Node(etcd1.endpoints, 2, tmp_path / "n2", ttl=2)
    pid = PartitionId("d", 0)
    try:
        new.start("registration")
        await within(new.registration.wait_registered())
        await old.registration.register()
        await old.election.campaign()  # no keep-alive runs for it: as if its process were paused
        epochs = {1: old.registration.epoch or 0, 2: new.registration.epoch or 0}
        await create_states(old, {pid: initial_state((1, 2), epochs, 1), PartitionId("d", 1): initial_state((1, 2), epochs, 1)})
        before = await old.session.get(partition_key(KEYS, pid))
        follower = PartitionStates(new.session, KEYS)
        seen: list[tuple[PartitionId, PartitionState | None]] = []

        def on_change(changed: PartitionId, state: PartitionState | None) -> None:
            seen.append((changed, state))
            if state is None:
                raise RuntimeError("the caller's bug")  # logged; the following changes are still reported

        new.tasks.append(asyncio.create_task(follower.follow(on_change)))
        await eventually("the follower read", lambda: _following(follower))
        new.start("election")
        await within(new.election.wait_elected())  # after the old controller's lease expired
        zombie = Reconciler(PartitionStates(old.session, KEYS), old.election)
        with pytest.raises(NotController, match="no longer the elected one"):
            await zombie.reconcile_once()  # node 1 is gone: it would elect node 2, and may not
        after = await old.session.get(partition_key(KEYS, pid))
        assert before is not None and after is not None and after.mod_revision == before.mod_revision
        assert zombie.written == 0 and old.election.epoch is None
        # node 1 also leads d/0: paused past its lease (nodes/1 gone), it would shrink the ISR to itself from its
        # stale view (r25p #3): refused, so the controller elects node 2 rather than leaving d/0 leaderless
        known = await PartitionStates(old.session, KEYS).read(pid)
        assert known is not None and known.leader == 1
        alone = AlterIsr(1, known.leader_epoch, known.partition_epoch, (IsrMember(1, epochs[1]),), epochs[1])
        out = await PartitionStates(old.session, KEYS).alter_isr(known, pid, alone, epochs)
        assert out.error == ErrorCode.stale_broker_epoch and out.state == known
        damaged = {partition_key(KEYS, PartitionId("d", 1)): encode_state(initial_state((1, 2), epochs, 1))[:-9],
                   KEYS.root + b"partitions/d": encode_state(initial_state((1, 2), epochs, 1))}
        for key, value in damaged.items():
            await new.session.txn([], [tx.Put(key, value)])
        new.tasks.append(asyncio.create_task(Reconciler(PartitionStates(new.session, KEYS), new.election).run()))
        view = PartitionStates(new.session, KEYS)
        state = await _until(view, pid, "node 2 elected", lambda s: s.leader == 2)
        assert state.leader_epoch == 1 and state.isr == (IsrMember(2, epochs[2]),)
        assert list(await view.read_all()) == [pid]
        await eventually("the follower saw it all", lambda: _same(follower, view))  # d/1 left out by the watch too
        damaged_pid = PartitionId("d", 1)  # both read at first; then d/1 damaged (reported as gone), d/0 elected
        assert [c for c, _ in seen] == [pid, damaged_pid, damaged_pid, pid]
        assert seen[2:] == [(damaged_pid, None), (pid, state)]
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert any("d/1" in e and "not walgate's" in e for e in errors), errors
        assert any("partitions/d'" in e and "not a partition state's key" in e for e in errors), errors
        assert any("d/1's change failed: RuntimeError: the caller's bug" in e for e in errors), errors
        assert all(r.exc_info is None for r in caplog.records)
    finally:
        await old.close()
        await new.close()


async def test_a_controller_found_no_longer_elected_while_it_waits_logs_its_reconciliation_stopped(
        etcd1: EtcdCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The election learns it lost (as a paused controller's does on its resume) before the reconciliation, waiting for
    a change, tries a write: no NotController comes, and the stop is logged all the same, once, naming the epoch
    (the Jepsen-style zombie controller test waits for that line)."""
    n1 = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=2)
    try:
        n1.start("registration")
        await within(n1.registration.wait_registered())
        epoch = await within(n1.election.campaign())  # (no election task: nothing else sets its epoch)
        caplog.set_level(logging.INFO, "walgate.cluster")
        n1.tasks.append(asyncio.create_task(Reconciler(PartitionStates(n1.session, KEYS), n1.election).run()))
        await asyncio.sleep(0.5)  # (its first pass done: it waits for a change, at most the lease's TTL)
        n1.election._set(None)  # what the election's run does once it sees the registration lost
        stopped = f"controller: reconciliation stopped: controller epoch {epoch} is no longer this node's"

        async def logged() -> bool:
            return any(stopped in r.getMessage() for r in caplog.records)

        await eventually("the stop logged", logged, timeout=10)
        assert [r.getMessage() for r in caplog.records if "reconciliation stopped" in r.getMessage()] == [stopped]
    finally:
        await n1.close()


async def test_a_refused_batch_does_not_stop_the_later_ones(etcd1: EtcdCluster, tmp_path: Path) -> None:
    """A leader's ISR change between the controller's read and its write refuses that batch only: the later batches
    are written, and the next pass writes what the refused one still needs, keeping the leader's change. A
    registration made after the read refuses every batch (registrations and states are read at one revision)."""
    n1, n2, n3 = nodes = [Node(etcd1.endpoints, i, tmp_path / f"n{i}", ttl=2) for i in (1, 2, 3)]
    try:
        n1.start("registration", "election")
        await within(n1.election.wait_elected())
        n2.start("registration")
        await eventually("all registered", lambda: _all_registered(nodes[:2]))
        epochs = {1: n1.registration.epoch or 0, 2: n2.registration.epoch or 0}
        gone = epochs | {3: 1}  # node 3 was in sync and is not registered: every ISR loses it
        created = {PartitionId("d", v): initial_state((2, 1, 3), gone, 1) for v in range(MAX_STATES_PER_TXN + 1)}
        await create_states(n1, created)
        reconciler = Reconciler(PartitionStates(n1.session, KEYS), n1.election)
        snapshot = await reconciler.snapshot()
        assert snapshot.live == epochs and snapshot.states.keys() == created.keys()
        changes = reconcile_all(snapshot.states, snapshot.live)
        assert len(changes) == MAX_STATES_PER_TXN + 1
        first = PartitionId("d", 0)
        known = snapshot.states[first]
        shrunk = await PartitionStates(n2.session, KEYS).alter_isr(known, first, AlterIsr(
            2, 0, known.partition_epoch, (IsrMember(2, epochs[2]),), epochs[2]), epochs)
        assert shrunk.error is None and shrunk.state is not None
        assert await reconciler.write(snapshot, changes) == MAX_STATES_PER_TXN  # the first batch refused
        last = PartitionId("d", MAX_STATES_PER_TXN)
        written = await reconciler.states.read(last)
        assert reconciler.written == 1 and written is not None
        assert replace(written, partition_epoch=0) == replace(changes[last], partition_epoch=0)
        stale = await reconciler.snapshot()
        await n3.registration.register()  # node 3 registers (under a new broker epoch) after that read
        assert await reconciler.write(stale, reconcile_all(stale.states, stale.live)) == MAX_STATES_PER_TXN - 1
        assert await reconciler.reconcile_once() > 0  # d/0 needs nothing more: 59 written
        assert reconciler.written == MAX_STATES_PER_TXN
        states = await reconciler.states.read_all()
        assert all(3 not in s.isr_ids and s.leader == 2 for s in states.values())
        assert states[first].isr == (IsrMember(2, epochs[2]),)  # the leader's shrink kept
    finally:
        for n in nodes:
            await n.close()


@contextlib.asynccontextmanager
async def controller_and_one(etcd: EtcdCluster, tmp_path: Path) -> AsyncIterator[tuple[Node, Node]]:
    """Nodes 1 (registered, elected controller) and 2 (registered), closed at the end."""
    n1, n2 = nodes = [Node(etcd.endpoints, i, tmp_path / f"n{i}", ttl=2) for i in (1, 2)]
    try:
        n1.start("registration", "election")
        await within(n1.election.wait_elected())
        n2.start("registration")
        await eventually("all registered", lambda: _all_registered(nodes))
        yield n1, n2
    finally:
        for n in nodes:
            await n.close()


async def test_the_controller_counts_the_unclean_elections_it_writes(etcd1: EtcdCluster, tmp_path: Path) -> None:
    """A vgroup whose ISR and ELR hold only node 3, gone, elects live node 2 where unclean election is allowed (one
    unclean election counted, Kafka's UncleanLeaderElectionsPerSec); one whose ISR holds node 2 elects it cleanly."""
    async with controller_and_one(etcd1, tmp_path) as (n1, n2):
        e2 = n2.registration.epoch or 0
        gone = IsrMember(3, 1)
        await create_states(n1, {
            PartitionId("d", 0): PartitionState((3, 2, 1), 3, 0, 0, (gone,), (), 1, unclean_election=True),
            PartitionId("d", 1): PartitionState((3, 2, 1), 3, 0, 0, (IsrMember(2, e2), gone), (), 1)})
        reconciler = Reconciler(PartitionStates(n1.session, KEYS), n1.election)
        assert await reconciler.reconcile_once() > 0
        states = await reconciler.states.read_all()
        assert [states[PartitionId("d", v)].leader for v in (0, 1)] == [2, 2]
        assert reconciler.unclean_elections == 1


async def test_etcd_majority_lost_changes_nothing_then_reconciliation_resumes(tmp_path: Path) -> None:
    with etcd_cluster(tmp_path / "etcd", 3) as etcd:
        leader = Node(etcd.endpoints, 1, tmp_path / "n1", ttl=2, timeout=1.0)
        others = [Node(etcd.endpoints, i, tmp_path / f"n{i}", ttl=20, timeout=1.0) for i in (2, 3)]
        nodes = [leader, *others]
        pid = PartitionId("d", 0)
        try:
            reconciler = _start(others[0])
            controller = await _controller(others[:1])  # node 2, whose registration outlives the outage
            _start(leader)
            _start(others[1])
            await eventually("all registered", lambda: _all_registered(nodes))
            epochs = {n.info.node_id: n.registration.epoch or 0 for n in nodes}
            await create_states(controller, {pid: initial_state((1, 2, 3), epochs, 2)})
            follower = PartitionStates(others[1].session, KEYS)
            others[1].tasks.append(asyncio.create_task(follower.follow(lambda pid, s: None)))
            await eventually("the follower read", lambda: _following(follower))
            for member in etcd.members[1:]:
                member.stop()
            await leader.stop()  # the leader dies while etcd cannot let its lease expire
            died = asyncio.get_running_loop().time()
            with pytest.raises(ControlPlaneUnavailable):
                await reconciler.reconcile_once()  # a pass now reads nothing and writes nothing
            await asyncio.sleep(max(0.0, died + 2.5 - asyncio.get_running_loop().time()))  # past the leader's TTL
            for member in etcd.members[1:]:
                member.start()
            await asyncio.to_thread(etcd.wait_healthy, etcd.members)
            view = PartitionStates(others[0].session, KEYS)
            state = await _until(view, pid, "node 2 elected after etcd's recovery", lambda s: s.leader == 2)
            kv = await others[0].session.get(partition_key(KEYS, pid))
            assert kv is not None and kv.version == 2  # created, then this one election: nothing in between
            assert state.leader_epoch == 1 and state.isr == (IsrMember(2, epochs[2]), IsrMember(3, epochs[3]))
            assert all(n.registration.epoch == epochs[n.info.node_id] for n in others)
            await eventually("the follower's watch resumed", lambda: _same(follower, view))
        finally:
            for n in nodes:
                await n.close()


async def test_the_controller_creates_the_states_the_catalog_holds_and_partitions_lacks(
        etcd1: EtcdCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every replicated vgroup of the catalog gets its initial state (the first registered replica leading, the
    registered ones in sync), in transactions of at most 60; an existing state only takes the catalog's
    min.insync.replicas (after the creations), a damaged one is not overwritten; a vgroup whose catalog entry makes
    no state is reported at ERROR, the others created all the same; a key deleted later is created again by the
    running controller."""
    async with controller_and_one(etcd1, tmp_path) as (n1, n2):
        epochs = {1: n1.registration.epoch or 0, 2: n2.registration.epoch or 0}
        catalog = {PartitionId("db", v): ReplicatedVnode((3, 2, 1) if v % 2 else (1, 2, 3), 2, v == 4)
                   for v in range(MAX_STATES_PER_TXN + 5)}
        existing, damaged, unbuildable = PartitionId("db", 0), PartitionId("db", 1), PartitionId("bad", 0)
        catalog[unbuildable] = ReplicatedVnode((1, 2), 3)  # min.insync.replicas above the replicas
        await create_states(n1, {existing: initial_state((1, 2, 3), epochs, 1)})  # min_isr 1: not the catalog's 2
        await n1.session.txn([], [tx.Put(partition_key(KEYS, damaged), b"{not a state")])
        async def at(_seq: int) -> CatalogVnodes:
            return CatalogVnodes(catalog)

        reconciler = Reconciler(PartitionStates(n1.session, KEYS), n1.election, catalog=at)
        caplog.set_level(logging.ERROR, "walgate.cluster")
        assert await reconciler.reconcile_once() > 0
        assert [r.getMessage() for r in caplog.records if "bad/0" in r.getMessage()] == [
            "controller: bad/0 has no partition state and none can be built from its catalog entry: "
            "min.insync.replicas 3: between 1 and the replication factor 2"]
        states = await reconciler.states.read_all()
        assert set(states) == set(catalog) - {damaged, unbuildable} and reconciler.created == len(catalog) - 3
        assert states[existing].min_isr == 2  # the catalog's (a topic's min.insync.replicas altered), written after
        assert states[existing].partition_epoch > states[PartitionId("db", 2)].partition_epoch  # the creations
        for pid in set(catalog) - {existing, damaged, unbuildable}:  # (each at the revision it was found missing at)
            assert 0 < states[pid].leader_epoch < states[pid].partition_epoch
            assert replace(states[pid], partition_epoch=0) == initial_state(
                catalog[pid].replicas, epochs, 2, pid.vgroup == 4, leader_epoch=states[pid].leader_epoch)
            assert states[pid].leader == (2 if pid.vgroup % 2 else 1)  # node 3 is not registered
        assert await reconciler.reconcile_once() > 0 and reconciler.created == len(catalog) - 3  # nothing more
        assert (await n1.session.get(partition_key(KEYS, damaged))).value == b"{not a state"  # type: ignore[union-attr]
        n1.tasks.append(asyncio.create_task(reconciler.run()))
        gone = PartitionId("db", 7)
        await n1.session.txn([], [tx.Delete(partition_key(KEYS, gone))])  # an operator deletes it

        async def created_again() -> bool:
            return reconciler.created == len(catalog) - 2

        await eventually("db/7 created again", created_again)
        again = await reconciler.states.read(gone)
        assert again is not None and again.leader_epoch > states[gone].leader_epoch  # (never back: KIP-101)
        assert replace(again, partition_epoch=0) == initial_state((3, 2, 1), epochs, 2,
                                                                 leader_epoch=again.leader_epoch)


async def test_a_controller_whose_own_database_holds_a_replicated_databases_name_keeps_its_states(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    """The controller's data dir holds a database ``d`` of its own (a single node's, from before it joined), so its
    catalog passes the cluster's replicated ``d`` over: the states of the cluster's ``d`` are left alone, never taken
    for a dropped database's, while a dropped database's state is deleted (fails without ``unjudged``: checked, the
    cluster's ``d`` lost its state)."""
    async with controller_and_one(etcd1, tmp_path) as (n1, n2):
        catalog = Catalog.open(tmp_path / "catalog.log")
        catalog.node_id = 1
        catalog.apply({"op": "create_db", "name": "d", "id": new_db_id(), "options": {**DB_DEFAULTS, "VGROUPS": 1},
                       "created_ms": 0})  # the node's own, placing nothing
        catalog.cluster = True
        cluster_d = new_db_id()
        assert catalog.apply_shared(1, {"op": "create_db", "name": "d", "id": cluster_d, "created_ms": 0,
                                        "options": {**DB_DEFAULTS, "VGROUPS": 1}, "nodes": [1], "replicas": [[1, 2]]})
        epochs = {1: n1.registration.epoch or 0, 2: n2.registration.epoch or 0}
        kept, dropped = PartitionId(cluster_d, 0), PartitionId(new_db_id(), 0)
        await create_states(n1, {pid: initial_state((1, 2), epochs, 1) for pid in (kept, dropped)})

        async def at(_seq: int) -> CatalogVnodes:
            return catalog.controller_vnodes()

        reconciler = Reconciler(PartitionStates(n1.session, KEYS), n1.election, catalog=at)
        assert await reconciler.reconcile_once() > 0
        assert set(await reconciler.states.read_all()) == {kept} and reconciler.deleted == 1


async def _all_registered(nodes: list[Node]) -> bool:
    return all(n.registration.epoch is not None for n in nodes)


async def _registered_again(node: Node, old_epoch: int) -> bool:
    return node.registration.epoch is not None and node.registration.epoch > old_epoch


async def _absent(node: Node, key: bytes) -> bool:
    return await node.session.get(key) is None


async def _present(node: Node, key: bytes) -> bool:
    return await node.session.get(key) is not None


async def _following(view: PartitionStates) -> bool:
    return view.revision > 0  # its first read is done: it watches from there


async def _same(follower: PartitionStates, view: PartitionStates) -> bool:
    return follower.states == await view.read_all()


async def test_the_controller_follows_catalog_appends_at_once_and_deletes_the_states_of_dropped_databases(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    """Each pass asks the catalog as of the stream's last record at the revision it read (never older: a DROP
    DATABASE appended before the read is always seen; a catalog that does not answer within ``catalog_wait_s``
    holds back creations and deletions, never an election), an append to the stream wakes the pass at once (not after
    the lease TTL, 10 s here): a vgroup the catalog gains has its state within 2 s, and a vgroup it loses (its
    database dropped) has its state deleted, a damaged one included; a database made again gets new states."""
    n1 = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=10)
    try:
        n1.start("registration", "election")
        await within(n1.election.wait_elected())
        await eventually("registered", lambda: _all_registered([n1]))
        catalog: dict[PartitionId, ReplicatedVnode] = {}
        asked: list[int] = []

        answering = asyncio.Event()  # cleared: this node's catalog has not caught up (it answers once set)
        answering.set()

        async def at(seq: int) -> CatalogVnodes:
            asked.append(seq)
            await answering.wait()
            return CatalogVnodes(dict(catalog))

        async def append(seq: int) -> float:  # (what SharedCatalog's append writes, as far as the Reconciler reads)
            await n1.session.txn([], [tx.Put(KEYS.seq, str(seq).encode())])
            return asyncio.get_running_loop().time()

        reconciler = Reconciler(PartitionStates(n1.session, KEYS), n1.election, catalog=at, catalog_wait_s=0.5)
        old, damaged_old = PartitionId("old", 0), PartitionId("old", 1)
        epoch = n1.registration.epoch or 0
        await create_states(n1, {old: replace(initial_state((1,), {1: epoch}, 1), leader=NO_LEADER)})
        await n1.session.txn([], [tx.Put(partition_key(KEYS, damaged_old), b"{not a state")])
        await append(7)
        answering.clear()  # a pass whose catalog does not answer still elects, and deletes nothing
        assert await within(reconciler.reconcile_once(), 5) > 0 and asked == [7]
        assert (await reconciler.states.read_all())[old].leader == 1 and reconciler.deleted == 0
        answering.set()  # the next pass takes the answer to the question still asked
        assert await reconciler.reconcile_once() > 0 and asked == [7]
        assert await reconciler.states.read_all() == {} and reconciler.deleted == 2  # "old" is not in the catalog
        assert await _absent(n1, partition_key(KEYS, damaged_old))
        n1.tasks.append(asyncio.create_task(reconciler.run()))
        await eventually("the first pass waits", lambda: _is(len(asked) == 2))
        new = PartitionId("new", 0)
        catalog[new] = ReplicatedVnode((1,), 1)
        appended = await append(8)
        await eventually("the state of the vgroup the catalog gained", lambda: _present(n1, partition_key(KEYS, new)))
        assert asyncio.get_running_loop().time() - appended < 2 and asked[-1] == 8
        del catalog[new]
        again = PartitionId("new-again", 0)
        catalog[again] = ReplicatedVnode((1,), 1)
        appended = await append(9)
        await eventually("the dropped database's state deleted", lambda: _absent(n1, partition_key(KEYS, new)))
        await eventually("the state of the database made again", lambda: _present(n1, partition_key(KEYS, again)))
        assert asyncio.get_running_loop().time() - appended < 2 and reconciler.deleted == 3
    finally:
        await n1.close()


async def test_elections_never_wait_for_the_catalog_and_a_stuck_catalog_makes_no_passes_of_its_own(
        etcd1: EtcdCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """rv4 R2: with a catalog that never answers (its lanes stalled), a leaderless state is elected at once, not
    after ``catalog_wait_s``; and the passes that follow do not loop: one WARNING for the record awaited, no pass
    until something changes (here nothing does for 3 s, the lease TTL being 10 s)."""
    n1 = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=10)
    try:
        n1.start("registration", "election")
        await within(n1.election.wait_elected())
        await eventually("registered", lambda: _all_registered([n1]))
        asked: list[int] = []
        release = asyncio.Event()  # set at the end only

        async def stuck(seq: int) -> CatalogVnodes:
            asked.append(seq)
            await release.wait()
            return CatalogVnodes({})

        await n1.session.txn([], [tx.Put(KEYS.seq, b"3")])
        pid = PartitionId("r", 0)
        await create_states(n1, {pid: replace(initial_state((1,), {1: n1.registration.epoch or 0}, 1), leader=NO_LEADER)})
        view = PartitionStates(n1.session, KEYS)
        slow = Reconciler(view, n1.election, retry_delay=0.1, catalog=stuck, catalog_wait_s=60)
        started = asyncio.get_running_loop().time()
        task = asyncio.create_task(slow.reconcile_once())
        try:
            await _until(view, pid, "elected while the catalog is awaited", lambda s: s.leader == 1)
            assert asyncio.get_running_loop().time() - started < 10 and not task.done() and asked == [3]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        quick = Reconciler(view, n1.election, retry_delay=0.1, catalog=stuck, catalog_wait_s=0.2)
        with caplog.at_level(logging.WARNING, logger="walgate"):
            n1.tasks.append(asyncio.create_task(quick.run()))
            await eventually("the first pass", lambda: _is(quick.passes == 1))
            await asyncio.sleep(3)  # (no condition to wait for: nothing may happen)
        release.set()  # (the first reconciler's question ends)
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("walgate.cluster")]
        assert quick.passes == 1 and asked[1:] == [3] and len(warnings) == 1, (quick.passes, asked, warnings)
        assert "record 3 is not applied here yet" in warnings[0].getMessage()
    finally:
        await n1.close()


async def _is(value: bool) -> bool:
    return value
