"""The broker processes of ``rocketq serve --dledger N`` and ``rocketq serve --brokers N``.

Each broker is its own process, ``python -m rocketq.cli broker -c <conf>``, its output appended
to a log file the caller names; :func:`stop_brokers` ends them together: SIGTERM to every one
still running, then up to 30 s each to exit, SIGKILL for one that does not.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterable, Mapping

#: How long a broker may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 30.0


def spawn_brokers(confs: Mapping[str, str], log_paths: Mapping[str, str]) -> list[subprocess.Popen[bytes]]:
    """Start one broker per ``name → conf``, output to ``log_paths[name]``; in ``confs`` order."""
    procs = []
    for name, conf in confs.items():
        with open(log_paths[name], "ab") as log_file:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "rocketq.cli", "broker", "-c", conf],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


async def stop_brokers(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            await asyncio.to_thread(p.wait, STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
