"""The ``rocketq`` command loads the client SDK only for the commands that use it: a server
process (``serve``, ``broker``, ``namesrv``) keeps its idle memory for itself (about 2 MiB of
client modules; idle RSS target of ``rocketq serve`` in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from rocketq import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith("rocketq."))))
"""


def loaded_after(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60, check=True
    )
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


@pytest.mark.parametrize("command", ["serve", "broker", "namesrv", "proxy", "bench", "admin"])
def test_building_the_parser_loads_no_client_module(command: str) -> None:
    modules = loaded_after(command, "--help")
    assert "rocketq.cli" in modules
    assert not [m for m in modules if m.startswith("rocketq.client")]


def test_the_client_commands_still_load_it_when_they_run() -> None:
    # an admin command against a port nobody listens on: it fails, after loading the client
    modules = loaded_after("admin", "topicList", "-n", "127.0.0.1:1", "--timeout-ms", "200")
    assert "rocketq.client.admin" in modules
