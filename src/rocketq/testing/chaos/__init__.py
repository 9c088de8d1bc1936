"""Jepsen-style fault testing of a DLedger group: real processes, real sockets, injected faults,
a recorded history and a checker. See docs/chaos.md.

Modules::

    cluster.py   ChaosGroup: a name server and a DLedger group of brokers as processes, every
                 peer link through its own FaultProxy, and the faults to inject into them
    schedule.py  seeded fault schedules: which nemesis strikes when, for how long
    clock.py     the wall-clock jump shim (LD_PRELOAD) of the clock-jump nemesis
    workload.py  recorded producers and consumers against a name server, and the final drain
    history.py   the operation history (invoke / ok / fail / info), JSONL
    check.py     the checker over histories, the brokers' Raft event logs and replica dumps
    replicas.py  a read-only reader of a broker's DLedger files (the replica dumps)
    report.py    unavailability per fault, percentiles, the campaign's tables and charts
"""
