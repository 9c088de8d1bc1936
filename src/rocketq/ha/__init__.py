"""DLedger mode: the CommitLog replicated across a group of brokers with Raft.

The pieces (nothing is imported at package import): :mod:`rocketq.ha.raft`, the consensus core
(pure, sans-IO), with its messages, events and actions in :mod:`rocketq.ha.raft_types` and its log
view in :mod:`rocketq.ha.raft_log`; the DLedger entry store (``entry_store.py``, its codec in
``entry_format.py``, its recovery in ``entry_recovery.py``); the asyncio driver
(:mod:`rocketq.ha.driver`, ``RaftGroupLog``, configured by :mod:`rocketq.ha.driver_config`) with
its peer transport (``peer_transport.py``, ``peer_codec.py``), and one member as a process for
tests (``python -m rocketq.ha.node``). The broker sees them through
:mod:`rocketq.ha.replicated_log`.
"""
