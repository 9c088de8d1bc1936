"""Local wall-clock times to epoch milliseconds, the way ``java.util.Calendar`` resolves them.

A local date and time names no instant, or two, around a daylight-saving change. Java's
``GregorianCalendar`` (behind ``SimpleDateFormat.parse`` and ``Calendar.getTimeInMillis``) takes
the *later* instant in both cases: a time in the hour the clocks skip is read with the offset
before the change (02:30 on the spring-forward night in Berlin is 01:30 UTC, shown as 03:30), and
a time in the hour that repeats is read as standard time (02:30 on the fall-back night is the
second 02:30, 01:30 UTC). Python's naive ``datetime.timestamp()`` agrees on the skipped hour but
takes the first of a repeated one, so RocketMQ's local-time rules (``MessageClientIDSetter``'s
month start, mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS``) go through :func:`local_to_epoch_ms`.
"""

from __future__ import annotations

import datetime as _dt
import time


def wall_clock_ms() -> int:
    """Milliseconds since the epoch, now."""
    return time.time_ns() // 1_000_000


def local_to_epoch_ms(local: _dt.datetime) -> int:
    """Epoch milliseconds of the naive local date and time ``local`` (in the process's time zone,
    ``TZ``), resolved as Java's ``Calendar`` does: the later instant when there are two, the offset
    before the change when there is none."""
    if local.tzinfo is not None:
        raise ValueError(f"{local!r} is not a naive local time")
    whole = local.replace(microsecond=0)
    seconds = max(int(whole.replace(fold=0).timestamp()), int(whole.replace(fold=1).timestamp()))
    return seconds * 1000 + local.microsecond // 1000


def local_month_bounds_ms(epoch_ms: int) -> tuple[int, int]:
    """The epoch milliseconds of local midnight on the first of the month holding ``epoch_ms`` and
    of the first of the next month (``Calendar`` set to day 1, 00:00:00.000, then plus a month)."""
    local = _dt.datetime.fromtimestamp(epoch_ms // 1000)
    start = _dt.datetime(local.year, local.month, 1)
    nxt = _dt.datetime(local.year + local.month // 12, local.month % 12 + 1, 1)
    return local_to_epoch_ms(start), local_to_epoch_ms(nxt)


__all__ = ["local_month_bounds_ms", "local_to_epoch_ms", "wall_clock_ms"]
