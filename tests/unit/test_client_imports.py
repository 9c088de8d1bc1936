"""Importing the client SDK loads neither the broker, the name server nor the storage engine: the
client shares only the wire vocabulary (:mod:`rocketq.protocol`) and the frame codec with them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
exec(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.startswith("rocketq"))))
"""

SERVER_PACKAGES = ("rocketq.broker", "rocketq.namesrv", "rocketq.store", "rocketq.proxy", "rocketq.spark")


def loaded_after(statement: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, statement], capture_output=True, text=True, timeout=60, check=True
    )
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


def server_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in SERVER_PACKAGES)]


def test_importing_the_package_loads_no_client_module_yet() -> None:
    modules = loaded_after("import rocketq.client")
    assert modules == ["rocketq", "rocketq._lazy", "rocketq.client"]  # _lazy: the PEP 562 exports


@pytest.mark.parametrize(
    "statement",
    [
        "from rocketq.client import Producer, PushConsumer, LitePullConsumer, Admin",
        "from rocketq.client import TransactionProducer, MessageQueue, ConsumeStatus",
        "import rocketq.client.aio, rocketq.client.lite_pull, rocketq.client.push, rocketq.client.admin",
    ],
)
def test_the_client_classes_load_no_server_module(statement: str) -> None:
    modules = loaded_after(statement)
    assert "rocketq.client.sync" in modules or "rocketq.client.aio" in modules
    assert "rocketq.protocol.headers" in modules
    assert server_modules(modules) == []


def test_the_probe_sees_server_modules_when_they_load() -> None:
    modules = loaded_after("import rocketq.client.admin, rocketq.broker.server")
    found = server_modules(modules)
    assert "rocketq.broker.server" in found
    assert "rocketq.store.commitlog" in found
