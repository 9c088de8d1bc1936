"""Helpers shared by the test directories: real ``rocketq`` processes (:mod:`_support.procs`)."""
