"""DataVersion: the change counter of a broker metadata table (RocketMQ ``DataVersion``).

JSON (RocketMQ 5.x; 4.x has no ``stateVersion``)::

    {"counter":3,"stateVersion":0,"timestamp":1700000000000}

``counter`` grows by one per change and ``timestamp`` is the time of the last change in ms. Name
servers compare the topic table's version on every registration to decide whether to re-read the
topic configs, so every change to a table must go through :meth:`DataVersion.next_version`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rocketq.protocol.fastjson import as_int
from rocketq.wallclock import wall_clock_ms


@dataclass(slots=True)
class DataVersion:
    counter: int = 0
    state_version: int = 0
    timestamp: int = field(default_factory=wall_clock_ms)

    def next_version(self, state_version: int = 0) -> None:
        self.counter += 1
        self.state_version = state_version
        self.timestamp = wall_clock_ms()

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: object) -> DataVersion:
        """Tolerant: missing or malformed fields keep their defaults."""
        version = cls()
        if isinstance(obj, dict):
            version.counter = as_int(obj.get("counter"), 0)
            version.state_version = as_int(obj.get("stateVersion"), 0)
            version.timestamp = as_int(obj.get("timestamp"), version.timestamp)
        return version

    def copy(self) -> DataVersion:
        return DataVersion(self.counter, self.state_version, self.timestamp)
