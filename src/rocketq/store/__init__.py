"""The embedded storage engine (usable without any network)."""

from rocketq.config import FlushDiskType, StoreConfig
from rocketq.store.commitlog import PutMessageResult, PutMessageStatus
from rocketq.store.message_store import MessageStore

__all__ = ["FlushDiskType", "MessageStore", "PutMessageResult", "PutMessageStatus", "StoreConfig"]
