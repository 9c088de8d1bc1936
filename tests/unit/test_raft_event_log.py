"""The Raft event log writer and reader (rocketq.ha.event_log) on real files, and its setting
from broker.conf."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from rocketq.config import StoreConfig, from_rocketmq_properties
from rocketq.ha.driver_config import DLedgerConfig
from rocketq.ha.event_log import EventLog, event_log_path, read_events
from rocketq.ha.node import parse_args


def test_lines_are_written_at_once_in_order(tmp_path: pathlib.Path) -> None:
    log = EventLog(str(tmp_path / "ev-{selfId}.jsonl"), "n1", commit_interval_ms=0)
    assert log.path == str(tmp_path / "ev-n1.jsonl")
    log.event("start", term=0, ledgerEnd=-1, commit=-1)
    log.commit(3, 1)
    log.event("role", role="LEADER", term=1, leader="n1", ledgerEnd=3, commit=3)
    # nothing buffered in the process: another reader sees every line before close
    got = list(read_events(log.path))
    assert [e["ev"] for e in got] == ["start", "commit", "role"]
    assert got[1]["commit"] == 3 and got[1]["term"] == 1 and got[2]["leader"] == "n1"
    assert all(e["node"] == "n1" and e["pid"] == os.getpid() and e["mono_ns"] > 0 for e in got)
    log.close()
    log.close()


def test_commit_advances_are_coalesced_but_never_out_of_order(tmp_path: pathlib.Path) -> None:
    log = EventLog(str(tmp_path / "ev.jsonl"), "n0", commit_interval_ms=60_000)
    log.commit(1, 1)  # the first one goes out at once
    for i in range(2, 50):
        log.commit(i, 1)
    assert [e.get("commit") for e in read_events(log.path)] == [1]
    log.event("truncate", **{"from": 60, "to": 61}, commit=49)  # the held value first
    log.commit(50, 2)
    log.commit(50, 2)
    log.close()  # and the last held one at close
    got = [(e["ev"], e.get("commit")) for e in read_events(log.path)]
    assert got == [("commit", 1), ("commit", 49), ("truncate", 49), ("commit", 50)]


def test_commit_lines_come_at_most_every_interval(tmp_path: pathlib.Path) -> None:
    log = EventLog(str(tmp_path / "ev.jsonl"), "n0", commit_interval_ms=20)
    began = time.monotonic()
    i = 0
    while time.monotonic() - began < 0.2:
        i += 1
        log.commit(i, 1)
    log.close()
    commits = [e["commit"] for e in read_events(log.path)]
    assert commits == sorted(commits) and commits[-1] == i
    assert 2 <= len(commits) <= 13


def test_read_events_skips_a_torn_last_line_and_names_a_bad_one(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ev.jsonl"
    path.write_text('{"ev":"start","node":"n0"}\n{"ev":"co')
    assert [e["ev"] for e in read_events(str(path))] == ["start"]
    path.write_text('{"ev":"co\n{"ev":"start","node":"n0"}\n')
    with pytest.raises(ValueError, match=r"ev\.jsonl:1: not a JSON event line"):
        list(read_events(str(path)))
    path.write_text('{"node":"n0"}\n')
    with pytest.raises(ValueError, match="needs 'ev' and 'node'"):
        list(read_events(str(path)))


def test_the_setting_from_broker_conf_and_its_placeholder() -> None:
    props = {
        "dLegerPeers": "n0-127.0.0.1:40911",
        "dLegerSelfId": "n0",
        "dLegerEventLogPath": "/x/ev-{selfId}.jsonl",
    }
    assert DLedgerConfig.from_broker_conf(props).event_log_path == "/x/ev-{selfId}.jsonl"
    del props["dLegerEventLogPath"]
    assert DLedgerConfig.from_broker_conf(props).event_log_path is None
    cfg = from_rocketmq_properties(StoreConfig, {"dLegerEventLogPath": "/y/e.jsonl"})
    assert cfg.d_leger_event_log_path == "/y/e.jsonl"
    assert StoreConfig().d_leger_event_log_path == ""
    assert event_log_path("/y/{selfId}/e-{selfId}", "n2") == "/y/n2/e-n2"


def test_the_node_process_option() -> None:
    argv = ["--self", "n0", "--peers", "n0-127.0.0.1:40911;n1-127.0.0.1:40912", "--data-dir", "/tmp/g"]
    assert parse_args(argv).event_log_path is None
    assert (
        parse_args([*argv, "--event-log", "/tmp/g/ev-{selfId}.jsonl"]).event_log_path
        == "/tmp/g/ev-{selfId}.jsonl"
    )
