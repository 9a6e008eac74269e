"""The web console's cluster page model (:mod:`walgate.gateway.console.cluster_page`): what a node holds (its
membership, the broker epochs, the partition states, the catalog's placement) turned into the page's JSON; and the
page's API on a single node, which says it is not a cluster's. The page in Chromium against three real nodes:
tests/cluster/test_serve_cluster_console.py."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from walgate.cluster.model import Membership, NodeInfo
from walgate.cluster.partition_codec import PartitionId
from walgate.gateway.config import Config
from walgate.gateway.console.cluster_page import NO_STATE_EPOCH, Placed, cluster_page
from walgate.gateway.server import Gateway
from walgate.replication.partition import NO_LEADER, IsrMember, PartitionState

MEMBERSHIP = Membership((NodeInfo(1, "i1", ("PLAINTEXT://h1:9092",), "r1", "http://h1:6041"),
                         NodeInfo(2, "i2", ("SASL_SSL://h2:9093", "PLAINTEXT://h2:9092"), "r2")), (1, 2, 3), 2)
EPOCHS = {1: 10, 2: 20}  # node 3 is down


def _state(replicas: tuple[int, ...], leader: int, isr: dict[int, int], min_isr: int = 2,
           elr: tuple[int, ...] = ()) -> PartitionState:
    return PartitionState(replicas, leader, 7, 9, tuple(IsrMember(r, e) for r, e in sorted(isr.items())), elr, min_isr)


def test_nodes_replicated_and_one_copy_vgroups_are_shown_with_what_is_wrong_with_each() -> None:
    states = {
        PartitionId("aa", 0): _state((1, 2, 3), 1, {1: 10, 2: 20, 3: 30}),  # node 3 down, not fenced out yet
        PartitionId("aa", 1): _state((2, 3, 1), 2, {2: 20, 1: 9}),  # node 1 restarted: its old epoch's entry
        PartitionId("bb", 0): _state((3, 1), 3, {3: 30}, elr=(1,)),  # led by the node down: offline
        PartitionId("zz", 0): _state((1, 3), NO_LEADER, {}, min_isr=1),  # a database the catalog does not name
    }
    placed = [Placed("aa", "r", None, 0, (1, 2, 3)), Placed("aa", "r", None, 1, (2, 3, 1)),
              Placed("bb", "kafka_events", "events", 0, (3, 1)),
              Placed("bb", "kafka_events", "events", 1, (1, 2)),  # replicated, its state not read yet
              Placed("cc", "power", None, 0, (1,)), Placed("cc", "power", None, 1, (3,))]  # one copy each
    page = cluster_page("walgate", 1, MEMBERSHIP, EPOCHS, states, placed)
    assert (page["cluster"], page["node_id"], page["controller"]) == ("walgate", 1, 2)
    assert [(n["node_id"], n["live"], n["address"], n["http"], n["rack"], n["broker_epoch"], n["controller"],
             n["caught_up"], n["catching_up"]) for n in page["nodes"]] == [
        (1, True, "h1:9092", "http://h1:6041", "r1", 10, False, False, ["r/1", "events/0", "zz/0"]),
        (2, True, "h2:9093", None, "r2", 20, True, True, []),
        (3, False, None, None, None, None, False, False, []),
    ]
    rows = [(p["topic"] or p["database"] or p["db_id"], p["vgroup"], p["kind"], p["leader"], p["leader_epoch"],
             p["replicas"], p["isr"], p["elr"], p["under_replicated"], p["under_min_isr"], p["offline"])
            for p in page["partitions"]]
    assert rows == [
        ("events", 0, "replicated", 3, 7, (3, 1), (3,), (1,), True, True, True),
        ("events", 1, "no-state", None, NO_STATE_EPOCH, (1, 2), (), (), True, True, True),
        ("power", 0, "one-copy", 1, 0, (1,), (1,), (), False, False, False),
        ("power", 1, "one-copy", None, 0, (3,), (3,), (), False, False, True),
        ("r", 0, "replicated", 1, 7, (1, 2, 3), (1, 2, 3), (), False, False, False),
        ("r", 1, "replicated", 2, 7, (2, 3, 1), (1, 2), (), True, False, False),
        ("zz", 0, "replicated", None, 7, (1, 3), (), (), True, True, True),
    ]
    assert all(p["adding_replicas"] == () and p["removing_replicas"] == () for p in page["partitions"])


def test_a_move_in_progress_shows_its_adding_and_removing_replicas() -> None:
    moving = PartitionState((2, 3, 1), 1, 7, 9, (IsrMember(1, 10), IsrMember(2, 20)), (), 1, adding=(3,), removing=(1,))
    page = cluster_page("walgate", 1, MEMBERSHIP, EPOCHS, {PartitionId("aa", 0): moving},
                        [Placed("aa", "r", None, 0, (1, 2))])
    [p] = page["partitions"]
    assert (p["replicas"], p["adding_replicas"], p["removing_replicas"]) == ((2, 3, 1), (3,), (1,))
    assert not p["under_replicated"]  # 2 in sync of the 2 original replicas (Kafka: the adding ones do not count)


def test_a_node_not_registered_yet_and_no_states_show_every_vgroup_by_its_placement() -> None:
    page = cluster_page("c", 1, Membership(), {}, {}, [Placed("aa", "r", None, 0, (1, 2, 3)),
                                                      Placed("cc", "power", None, 0, (1,))])
    assert (page["controller"], page["nodes"]) == (None, [])
    assert [(p["kind"], p["leader"], p["offline"]) for p in page["partitions"]] == [("one-copy", None, True),
                                                                                  ("no-state", None, True)]


async def test_a_single_node_answers_that_it_is_no_cluster(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)
    async with Gateway(config) as gateway, aiohttp.ClientSession() as session:
        host, port = gateway.http_address
        async with session.get(f"http://{host}:{port}/ui/api/cluster") as response:
            assert (response.status, await response.json()) == (200, {"cluster": None})
