"""Chaos testing of a DLedger group: real processes, real sockets, injected faults.

Modules::

    cluster.py   ChaosGroup: a name server and a DLedger group of brokers as processes, every
                 peer link through its own FaultProxy, and the faults to inject into them
"""
