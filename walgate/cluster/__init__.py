"""The cluster's control plane on etcd (issue 24): node registration, the controller election and its fence, the
catalog record stream, placement. Tested against real etcd; ``walgate serve --cluster`` runs it
(:mod:`walgate.gateway.cluster_member`, :mod:`walgate.gateway.shared_catalog`).

* :mod:`~walgate.cluster.model` — pure: etcd keys, stored values, the registration rule, the election rule, the
  record cursor, the errors.
* :mod:`~walgate.cluster.etcd` — :class:`EtcdSession`: the client over the cluster's endpoints (aetcd, gRPC).
* :mod:`~walgate.cluster.incarnation` — the data dir's incarnation id (``node.incarnation``).
* :mod:`~walgate.cluster.registry` — :class:`NodeRegistration`: ``nodes/<id>`` on a lease; broker epochs.
* :mod:`~walgate.cluster.election` — :class:`ControllerElection`: controller epochs, fenced writes.
* :mod:`~walgate.cluster.records` — :class:`RecordLog` (append, trim), :class:`RecordFollower` (apply in order).
* :mod:`~walgate.cluster.placement` — pure: the node of each new vgroup (balanced by count, racks alternated).

docs/cluster.md describes keys, epochs and fencing.
"""
