"""The embedded storage engine (usable without any network).

The names below are imported from their modules on first use (PEP 562), so importing one module
of the package (``rocketq.store.record_scan``) does not start loading the whole engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
