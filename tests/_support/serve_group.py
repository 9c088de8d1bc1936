"""``rocketq serve --dledger 3`` as a test fixture: the process, its banner and a few queries.

:class:`ServeGroup` starts ``serve --dledger 3`` (name server and three broker processes, remoting
only, ports picked by the OS) with its data under ``<tmp>/data``; after :meth:`start` it knows
the name server's address and, from the banner, every broker's address, self id and pid.
``master(admin)`` is the address the name servers list as brokerId 0 of ``broker-a``;
``members(admin)`` every brokerId → address; ``logs()`` the process's and the brokers' log tails
for a failing test to print; :func:`running` starts one for a fixture and closes it after.
"""

from __future__ import annotations

import contextlib
import pathlib
import re
from collections.abc import Iterator
from typing import TypeVar

from procs import RocketqProcess

from rocketq.client import Admin
from rocketq.errors import RocketqError

G = TypeVar("G", bound="ServeGroup")

BROKER = "broker-a"
WAIT_S = 45.0
_BROKER_LINE = re.compile(r"^\s+broker\s+(\S+:\d+)\s+\(\S+, brokerId (\d+), (\w+), pid (\d+)\)", re.MULTILINE)


class ServeGroup:
    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.data = tmp_path / "data"
        args = ["serve", "--dledger", "3", "--data-dir", str(self.data), "--namesrv-port", "0"]
        args += ["--broker-port", "0", "--grpc-port", "-1"]
        self.proc = RocketqProcess("serve-dledger3", args, tmp_path / "logs")
        self.namesrv = ""
        #: broker address → (self id, pid), from the banner
        self.brokers: dict[str, tuple[str, int]] = {}

    def start(self) -> None:
        self.namesrv = self.proc.wait_banner(["name server", "broker"], WAIT_S)["name server"]
        for addr, _bid, sid, pid in _BROKER_LINE.findall(self.proc.log_text(None)):
            self.brokers[addr] = (sid, int(pid))
        assert len(self.brokers) == 3, self.proc.log_text()

    @property
    def pids(self) -> dict[str, int]:
        """broker address → pid."""
        return {addr: pid for addr, (_sid, pid) in self.brokers.items()}

    @staticmethod
    def members(admin: Admin) -> dict[int, str]:
        """brokerId → address of the group as the name servers list it (empty if they cannot say)."""
        try:
            group = admin.cluster_info().broker_addr_table.get(BROKER)
        except RocketqError:
            return {}
        return {} if group is None else dict(group.broker_addrs)

    @classmethod
    def master(cls, admin: Admin) -> str | None:
        return cls.members(admin).get(0)

    def logs(self) -> str:
        out = [self.proc.diagnostics()]
        for path in sorted(self.data.glob("broker-n*.log")):
            out.append(f"--- {path.name} ---\n{path.read_text(errors='replace')[-6000:]}")
        return "\n".join(out)

    def close(self) -> None:
        self.proc.stop()


@contextlib.contextmanager
def running(group: G) -> Iterator[G]:
    """``group`` started; its logs printed when the block (setup or test) fails; closed after."""
    try:
        group.start()
        yield group
    except BaseException:
        print(group.logs())
        raise
    finally:
        group.close()
