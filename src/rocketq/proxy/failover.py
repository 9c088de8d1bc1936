"""Retrying what a broker group definitely refused while it changes its master (cluster mode).

In a DLedger group the master is whichever broker leads the Raft group; when it dies or steps
down, the name servers list no master for a moment and then the new one (about 1.5 s with the
timing ``rocketq serve --dledger`` writes, 6 to 12 s with DLedger's defaults). Meanwhile a
request to the group fails in one of three ways, each of which means it was **not** carried out:

    refusal                                   where it comes from
    ----------------------------------------  ---------------------------------------------------
    RemotingConnectError                      the old master's address no longer listens
    ServiceNotAvailable (14)                  a broker that is not the writable master: a
                                              follower names the leader in its remark; a new
                                              leader refuses until it has caught up
    SystemBusy (2)                            the log's pending appends are full
    NoMaster (a ServiceNotAvailable)          the route lists the broker name without a master

:func:`retrying` runs an attempt again on these, with a back-off from 100 ms doubling to 1 s,
while a deadline allows; each attempt fetches the topic's route again, so it finds the new master
once it has registered, as the remoting producer does after a refusal. Anything else, in
particular a timeout or a connection that dropped with the request in flight (the request may
have been carried out), is answered to the client at once: retrying those is the client's
choice. The deadline (:func:`retry_deadline`) leaves a fifth of the call's own remaining time
for the last attempt and the answer, and is at most ``cap_s`` after now.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import grpc

from rocketq.errors import RemotingConnectError, ServiceNotAvailable, SystemBusy

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Refusals after which nothing was carried out (see the module docstring).
DEFINITE: Final = (RemotingConnectError, ServiceNotAvailable, SystemBusy)
FIRST_BACKOFF_S: Final = 0.1
MAX_BACKOFF_S: Final = 1.0
#: The share of a call's remaining time that retries may use.
DEADLINE_SHARE: Final = 0.8


class NoMaster(ServiceNotAvailable):
    """The route lists the broker name, but no master for it: its group is choosing one."""


def retry_deadline(context: grpc.aio.ServicerContext, cap_s: float) -> float:
    """The monotonic time until which refused attempts are retried for this call."""
    remaining = context.time_remaining()
    window = cap_s if remaining is None else min(cap_s, remaining * DEADLINE_SHARE)
    return time.monotonic() + max(0.0, window)


async def retrying(deadline: float, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
    """``attempt()``, again after each :data:`DEFINITE` refusal while ``deadline`` (monotonic)
    allows another try after the back-off; the last refusal is raised."""
    delay = FIRST_BACKOFF_S
    tries = 1
    while True:
        try:
            return await attempt()
        except DEFINITE as exc:
            if time.monotonic() + delay >= deadline:
                if tries > 1:
                    exc.add_note(f"{what}: refused {tries} times while waiting for a master")
                raise
            log.info("%s refused (%s); trying again in %.1f s with the route fetched again", what, exc, delay)
        await asyncio.sleep(delay)
        delay = min(2 * delay, MAX_BACKOFF_S)
        tries += 1


__all__ = ["DEADLINE_SHARE", "DEFINITE", "NoMaster", "retry_deadline", "retrying"]
