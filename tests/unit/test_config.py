from __future__ import annotations

import dataclasses

import pytest

from rocketq.config import (
    FlushDiskType,
    StoreConfig,
    field_for_rocketmq_key,
    from_rocketmq_properties,
)
from rocketq.errors import ConfigError


def test_rocketmq_keys_map_to_fields_with_units() -> None:
    assert field_for_rocketmq_key(StoreConfig, "mappedFileSizeCommitLog") == "mapped_file_size_commit_log"
    assert field_for_rocketmq_key(StoreConfig, "flushIntervalCommitLog") == "flush_interval_commit_log_ms"
    assert field_for_rocketmq_key(StoreConfig, "fileReservedTime") == "file_reserved_time_hours"
    assert field_for_rocketmq_key(StoreConfig, "diskMaxUsedSpaceRatio") == "disk_max_used_space_ratio_percent"
    assert field_for_rocketmq_key(StoreConfig, "noSuchKey") is None


def test_from_broker_conf_properties() -> None:
    cfg = from_rocketmq_properties(
        StoreConfig,
        {
            "storePathRootDir": "/data/store",
            "flushDiskType": "SYNC_FLUSH",
            "fileReservedTime": "48",
            "transientStorePoolEnable": "true",
            "brokerClusterName": "DefaultCluster",  # not a store key: ignored
        },
    )
    assert cfg.store_path_root_dir == "/data/store"
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.file_reserved_time_hours == 48
    assert cfg.transient_store_pool_enable is True


def test_bad_values_are_all_reported() -> None:
    with pytest.raises(ConfigError) as info:
        from_rocketmq_properties(StoreConfig, {"fileReservedTime": "many", "transientStorePoolEnable": "yes"})
    assert "fileReservedTime" in str(info.value) and "transientStorePoolEnable" in str(info.value)
    with pytest.raises(ConfigError) as info2:
        StoreConfig(flush_disk_type="FAST", mapped_file_size_commit_log=10, max_properties_size=40000)  # type: ignore[arg-type]
    text = str(info2.value)
    assert "flush_disk_type='FAST'" in text
    assert "mapped_file_size_commit_log=10 B" in text
    assert "max_properties_size=40000 B" in text


def test_derived_values() -> None:
    cfg = StoreConfig(mapped_file_size_consume_queue=1001, store_path_root_dir="r")
    assert cfg.consume_queue_file_size == 1020
    assert cfg.commit_log_dir.endswith("r/commitlog")
    assert StoreConfig(flush_disk_type="sync_flush").flush_disk_type is FlushDiskType.SYNC_FLUSH  # type: ignore[arg-type]
    pool = StoreConfig(transient_store_pool_enable=True)
    assert pool.transient_store_pool_active
    assert not dataclasses.replace(pool, broker_role="SLAVE").transient_store_pool_active  # type: ignore[arg-type]
    assert not dataclasses.replace(pool, flush_disk_type="SYNC_FLUSH").transient_store_pool_active  # type: ignore[arg-type]


def test_enum_values_in_conf_files_are_case_insensitive() -> None:
    cfg = from_rocketmq_properties(StoreConfig, {"flushDiskType": "sync_flush"})
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
