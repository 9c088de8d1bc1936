"""DLedger mode: the CommitLog replicated across a group of brokers with Raft.

The Raft core (pure), its asyncio driver, the DLedger entry store (``entry_store.py``, codec in
``entry_format.py``) and the role change live here. Nothing is imported at package import.
"""
