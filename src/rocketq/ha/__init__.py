"""DLedger mode: the CommitLog replicated across a group of brokers with Raft.

:mod:`rocketq.ha.raft` is the consensus core (pure, sans-IO); :mod:`rocketq.ha.raft_types` its
messages, events and actions. The asyncio driver and the on-disk entry store wire it to the broker.
"""
