"""DLedger mode: the CommitLog replicated across a group of brokers with Raft.

The pieces (nothing is imported at package import): :mod:`rocketq.ha.raft`, the consensus core
(pure, sans-IO), with its messages, events and actions in :mod:`rocketq.ha.raft_types` and its log
view in :mod:`rocketq.ha.raft_log`; the DLedger entry store (``entry_store.py``, its codec in
``entry_format.py``, its recovery in ``entry_recovery.py``). The asyncio driver and the role
change wire them to the broker.
"""
