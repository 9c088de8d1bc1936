"""Put/get rates for GET_BROKER_RUNTIME_INFO (``putTps``, ``getTransferredTps``, day totals).

A sampler records the store's cumulative put and get counters once a second; a rate over a
window is (newest − the sample at least that old) / elapsed time. RocketMQ reports three windows
(10 s, 1 min, 10 min) as one space-separated string, e.g. ``"1520.3 1498.0 1210.7"``; ``mqadmin
clusterList`` reads the first. Day totals (``msgPutTotalTodayMorning`` …) are the counters at the
last local midnights the sampler saw.
"""

from __future__ import annotations

import collections
import datetime as dt
from dataclasses import dataclass, field

WINDOWS_S = (10, 60, 600)


@dataclass(slots=True)
class _Sample:
    t: float
    put: int
    get: int


@dataclass(slots=True)
class TpsSampler:
    samples: collections.deque[_Sample] = field(default_factory=lambda: collections.deque(maxlen=700))
    today: dt.date | None = None
    put_today_morning: int = 0
    get_today_morning: int = 0
    put_yesterday_morning: int = 0
    get_yesterday_morning: int = 0

    def sample(self, now_s: float, put_total: int, get_total: int, date: dt.date | None = None) -> None:
        self.samples.append(_Sample(now_s, put_total, get_total))
        day = date or dt.date.today()
        if self.today is None:
            self.today = day
            self.put_today_morning = self.put_yesterday_morning = put_total
            self.get_today_morning = self.get_yesterday_morning = get_total
        elif day != self.today:
            self.today = day
            self.put_yesterday_morning, self.get_yesterday_morning = (
                self.put_today_morning,
                self.get_today_morning,
            )
            self.put_today_morning, self.get_today_morning = put_total, get_total

    def _rate(self, window_s: float, which: str) -> float:
        if len(self.samples) < 2:
            return 0.0
        newest = self.samples[-1]
        oldest = self.samples[0]
        for s in self.samples:
            if newest.t - s.t <= window_s:
                break
            oldest = s
        elapsed = newest.t - oldest.t
        if elapsed <= 0:
            return 0.0
        return float(getattr(newest, which) - getattr(oldest, which)) / elapsed

    def put_tps(self) -> str:
        return " ".join(f"{self._rate(w, 'put'):.2f}" for w in WINDOWS_S)

    def get_tps(self) -> str:
        return " ".join(f"{self._rate(w, 'get'):.2f}" for w in WINDOWS_S)


__all__ = ["WINDOWS_S", "TpsSampler"]
