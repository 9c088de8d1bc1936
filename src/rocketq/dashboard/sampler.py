"""Topic TPS over the last hour: every ``interval_s`` the sum of each topic's queue max offsets
is read (GET_TOPIC_STATS_INFO) and kept; the rate between two samples is the topic's TPS."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

from rocketq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

WINDOW_S = 3600.0


class TpsSampler:
    def __init__(
        self,
        list_topics: Callable[[], Awaitable[list[str]]],
        max_offset_sum: Callable[[str], Awaitable[int]],
        interval_s: float = 10.0,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s={interval_s} must be > 0")
        self.interval_s = interval_s
        self._list_topics = list_topics
        self._max_offset_sum = max_offset_sum
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dashboard-tps-sampler")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.sample_once()
            except Exception as exc:
                log.warning("dashboard: TPS sampling failed: %s", exc)
            await asyncio.sleep(self.interval_s)

    async def sample_once(self) -> None:
        """Read every topic's max offsets once (each topic in turn; a failing topic is skipped)."""
        now = time.time()
        keep = int(WINDOW_S / self.interval_s) + 2
        topics = await self._list_topics()
        for topic in topics:
            try:
                total = await self._max_offset_sum(topic)
            except Exception:
                continue
            series = self._samples.setdefault(topic, deque(maxlen=keep))
            series.append((now, total))
        for gone in set(self._samples) - set(topics):
            del self._samples[gone]
        self.rounds += 1

    def series(self, topic: str) -> list[tuple[int, float]]:
        """(epoch ms, messages per second) between consecutive samples within the last hour."""
        samples = list(self._samples.get(topic, ()))
        cutoff = time.time() - WINDOW_S
        out: list[tuple[int, float]] = []
        for (t0, v0), (t1, v1) in itertools.pairwise(samples):
            if t1 < cutoff or t1 <= t0:
                continue
            out.append((int(t1 * 1000), max(0, v1 - v0) / (t1 - t0)))
        return out
