from __future__ import annotations

import pathlib

import pytest

from rocketq.config import StoreConfig


@pytest.fixture
def store_config(tmp_path: pathlib.Path) -> StoreConfig:
    """A store config with small segments, so tests roll segments quickly."""
    return StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        max_hash_slot_num=64,
        max_index_num=256,
    )
