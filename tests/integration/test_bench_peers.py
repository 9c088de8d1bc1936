"""bench/peers.py as a user runs it: the rocketq column always (a real ``rocketq serve`` child),
the Redis Streams and NATS JetStream columns where their servers and clients are installed.

Functional checks only (every case acknowledged every message, table and JSON shape, skips
named with their reason); the figures themselves are in docs/benchmarks.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "peers.py"
WORKLOADS = ["send", "send-async", "send64", "batch32", "consume"]
HEADER = (
    "| workload | body | durability | rocketq msgs/s | JetStream msgs/s | Redis msgs/s "
    "| rocketq/JetStream | rocketq/Redis | client µs/msg rq / JS / Redis | server µs/msg rq / JS / Redis |"
)
NUMBER = r"[0-9][0-9,]*"


def run_peers(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def table_rows(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    assert HEADER in lines, stdout
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


@pytest.mark.slow  # a benchmark run against a rocketq serve process
def test_rocketq_column_of_every_workload(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "peers.json"
    done = run_peers(
        *("--quick", "--messages", "100", "--only", "rocketq", "--sizes", "128,1024"),
        *("--durability", "async", "--json", str(out)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = table_rows(done.stdout)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (w, size, "async") for size in ("128 B", "1 KiB") for w in WORKLOADS
    ]
    for row in rows:
        assert re.fullmatch(NUMBER, row[3]), row
        assert row[4:8] == ["—", "—", "—", "—"], row  # no peer columns, no ratios
        assert re.fullmatch(rf"{NUMBER} / — / —", row[8]) and re.fullmatch(rf"{NUMBER} / — / —", row[9])
    doc = json.loads(out.read_text())
    assert doc["messages"] == 100 and doc["rounds"] == 1 and doc["skipped"] == {}
    assert doc["versions"]["rocketq/async"].endswith("(ASYNC_FLUSH)")
    assert doc["machine"]["cpus"] == os.cpu_count()
    assert len(doc["results"]) == len(doc["best"]) == 10
    for r in doc["results"]:
        assert r["system"] == "rocketq" and r["messages"] == 100 and r["round"] == 1
        assert r["msgs_per_s"] == pytest.approx(100 / r["seconds"])
        assert r["client_cpu_us_per_msg"] > 0 and r["server_cpu_us_per_msg"] >= 0


@pytest.mark.slow  # benchmark rounds against a rocketq serve process
def test_sync_flush_rounds_are_interleaved_and_the_best_is_kept(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "peers.json"
    done = run_peers(
        *("--messages", "50", "--rounds", "2", "--only", "rocketq", "--workloads", "send,batch32"),
        *("--sizes", "128", "--durability", "sync", "--json", str(out)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert [(r["round"], r["workload"]) for r in doc["results"]] == [
        (1, "send"),
        (1, "batch32"),
        (2, "send"),
        (2, "batch32"),
    ]
    assert doc["versions"]["rocketq/sync"].endswith("(SYNC_FLUSH)")
    for best in doc["best"]:
        rounds = [r["msgs_per_s"] for r in doc["results"] if r["workload"] == best["workload"]]
        assert best["msgs_per_s"] == max(rounds) and best["durability"] == "sync"
    rows = table_rows(done.stdout)
    assert [r[0] for r in rows] == ["send", "batch32"]


@pytest.mark.slow  # a benchmark run against a rocketq serve process
def test_a_missing_server_is_skipped_with_the_reason(tmp_path: pathlib.Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    done = run_peers(
        *("--quick", "--messages", "20", "--only", "rocketq,redis", "--workloads", "send"),
        *("--sizes", "128", "--durability", "async"),
        path=str(empty),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped Redis: redis-server not found on PATH (apt-get install -y redis-server)" in done.stdout
    (row,) = table_rows(done.stdout)
    assert row[5] == "—" and row[7] == "—" and re.fullmatch(NUMBER, row[3])


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--only", "kafka"], "--only: kafka not among rocketq, nats, redis"),
        (["--workloads", "send,fetch"], "--workloads: fetch not among"),
        (["--sizes", "0"], "each body size must be in 1..4095 bytes"),
        (["--durability", "fsync"], "--durability: fsync not among async, sync"),
        (["--messages", "0"], "--messages 0 and --rounds 2 must be > 0"),
    ],
)
def test_bad_options_are_refused(args: list[str], complaint: str) -> None:
    done = run_peers(*args)
    assert done.returncode == 2 and complaint in done.stderr, done.stderr


def peers_installed() -> bool:
    servers = all(
        shutil.which(exe) or shutil.which(exe, path="/usr/local/sbin:/usr/sbin:/sbin")
        for exe in ("redis-server", "nats-server")
    )
    clients = all(importlib.util.find_spec(mod) is not None for mod in ("redis", "nats"))
    return servers and clients


@pytest.mark.skipif(
    not peers_installed(), reason="redis-server, nats-server or their Python clients (.[bench]) missing"
)
def test_all_three_columns_and_the_ratios(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "peers.json"
    done = run_peers(
        *("--quick", "--messages", "200", "--sizes", "128", "--durability", "async,sync"),
        *("--json", str(out)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    rows = {(r[0], r[2]): r for r in table_rows(done.stdout)}
    assert len(rows) == 10
    for (workload, durability), row in rows.items():
        assert re.fullmatch(NUMBER, row[3]) and re.fullmatch(NUMBER, row[5]), row  # rocketq, Redis
        assert re.fullmatch(r"[0-9]+\.[0-9]{2}", row[7]), row
        # nats-server 2.9 has no sync-always setting: its sync column is skipped, with the reason
        if workload != "send" and f"nats/{durability}" in doc["versions"]:
            assert re.fullmatch(NUMBER, row[4]) and re.fullmatch(r"[0-9]+\.[0-9]{2}", row[6]), row
        else:
            assert row[4] == "—" and row[6] == "—", row
    assert "skipped JetStream send: nats-py is asyncio only" in done.stdout
    if "nats/sync" not in doc["versions"]:
        assert "has no JetStream sync-always setting" in doc["skipped"]["nats/sync"]
    assert {r["system"] for r in doc["results"]} == {"rocketq", "nats", "redis"}
    assert all(r["messages"] == 200 for r in doc["results"])


@pytest.mark.slow  # a benchmark run against a rocketq serve process
def test_uvloop_for_the_asyncio_clients_and_the_broker(tmp_path: pathlib.Path) -> None:
    if importlib.util.find_spec("uvloop") is None:
        pytest.skip("uvloop is not installed")
    out = tmp_path / "peers.json"
    done = run_peers(
        *("--quick", "--messages", "50", "--only", "rocketq", "--sizes", "128", "--durability", "async"),
        *("--workloads", "send-async", "--client-loop", "uvloop", "--rocketq-loop", "uvloop"),
        *("--json", str(out)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "asyncio clients on uvloop, rocketq serve on uvloop" in done.stdout
    assert [r[0] for r in table_rows(done.stdout)] == ["send-async"]
    doc = json.loads(out.read_text())
    assert doc["loops"] == {"clients": ["uvloop"], "rocketq": "uvloop"}
    best = [(r["system"], r["workload"], r["messages"]) for r in doc["best"]]
    assert best == [("rocketq", "send-async", 50)]


FLOOR_HEADER = (
    "| workload | body | durability | floor msgs/s | rocketq / floor | floor / JetStream | floor / Redis "
    "| floor client µs/msg | floor server µs/msg |"
)


@pytest.mark.slow  # a benchmark run against a rocketq serve process and an asyncio echo process
def test_the_asyncio_floor_runs_the_one_in_flight_cases_beside_rocketq(tmp_path: pathlib.Path) -> None:
    """``--floor``: an asyncio echo server and a client doing nothing else answer every request
    of ``send`` and ``send-async``, in the same interleaved rounds; the second table puts
    rocketq's rate over the floor's; the cases with more than one in flight are skipped for the
    floor with the reason."""
    out = tmp_path / "peers.json"
    done = run_peers(
        *("--quick", "--messages", "100", "--only", "rocketq", "--floor", "--sizes", "128"),
        *("--workloads", "send,send-async,send64", "--durability", "async", "--json", str(out)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped asyncio floor send64: the floor has one request in flight only" in done.stdout
    assert [r[0] for r in table_rows(done.stdout)] == ["send", "send-async", "send64"]
    lines = done.stdout.splitlines()
    assert FLOOR_HEADER in lines, done.stdout
    start = lines.index(FLOOR_HEADER) + 2
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[start : start + 2]]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("send", "128 B", "async"),
        ("send-async", "128 B", "async"),
    ]
    for row in rows:
        assert re.fullmatch(NUMBER, row[3]) and re.fullmatch(r"[0-9]+\.[0-9]{2}", row[4]), row
        assert row[5] == row[6] == "—", row  # no JetStream or Redis in this run
    doc = json.loads(out.read_text())
    floor = [r for r in doc["results"] if r["system"] == "floor"]
    assert [(r["workload"], r["messages"]) for r in floor] == [("send", 100), ("send-async", 100)]
    assert all(r["server_cpu_us_per_msg"] >= 0 and r["client_cpu_us_per_msg"] > 0 for r in floor)
    assert doc["skipped"] == {
        "floor/send64/128/async": "the floor has one request in flight only (send, send-async)"
    }
