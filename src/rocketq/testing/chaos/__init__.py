"""Jepsen-style fault testing of a DLedger group: a recorded workload (``workload.py``), the
operation history it writes (``history.py``), and a checker over histories, the brokers' Raft
event logs and the replicas' stores (``check.py``, ``replicas.py``). See docs/chaos.md."""
