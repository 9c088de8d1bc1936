"""Chaos testing of a DLedger group: real processes, real sockets, injected faults, a checker.

Modules::

    cluster.py   ChaosGroup: a name server and a DLedger group of brokers as processes, every
                 peer link through its own FaultProxy, and the faults to inject into them
    schedule.py  seeded fault schedules: which nemesis strikes when, for how long
    clock.py     the wall-clock jump shim (LD_PRELOAD) of the clock-jump nemesis
    report.py    unavailability per fault, percentiles, the campaign's tables and charts
"""
