"""The embedded storage engine (usable without any network).

The names below are imported from their modules on first use (PEP 562), so importing one module
of the package (``rocketq.store.record_scan``) does not start loading the whole engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketq._lazy import lazy_exports

if TYPE_CHECKING:
    from rocketq.config import FlushDiskType, StoreConfig
    from rocketq.store.commitlog import PutMessageResult, PutMessageStatus
    from rocketq.store.message_store import MessageStore

_EXPORTS: dict[str, str] = {
    "FlushDiskType": "rocketq.config",
    "MessageStore": "rocketq.store.message_store",
    "PutMessageResult": "rocketq.store.commitlog",
    "PutMessageStatus": "rocketq.store.commitlog",
    "StoreConfig": "rocketq.config",
}

__all__ = ["FlushDiskType", "MessageStore", "PutMessageResult", "PutMessageStatus", "StoreConfig"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
