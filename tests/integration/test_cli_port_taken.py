"""Every listening command started on a port another process holds exits non-zero with one line
naming the port and the flag (or config key) that changes it, and no traceback."""

from __future__ import annotations

import pathlib
import socket
import sys
from collections.abc import Callable, Iterator

import pytest
from procs import child_env, free_port, run_captured, write_broker_conf

DEADLINE_S = 60.0


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port with a listening socket on 127.0.0.1 (as another server would hold it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _serve(flag: str) -> Callable[[pathlib.Path, int], list[str]]:
    def args(tmp: pathlib.Path, port: int) -> list[str]:
        ports = {"--namesrv-port": "0", "--broker-port": "0", "--grpc-port": "-1"}
        ports[flag] = str(port)
        return ["serve", "--data-dir", str(tmp / "data"), *(x for kv in ports.items() for x in kv)]

    return args


def _namesrv(tmp: pathlib.Path, port: int) -> list[str]:
    return ["namesrv", "--port", str(port)]


def _broker_flag(tmp: pathlib.Path, port: int) -> list[str]:
    conf = write_broker_conf(tmp / "broker.conf", {"storePathRootDir": str(tmp / "store")})
    return ["broker", "-c", str(conf), "--port", str(port), "-n", f"127.0.0.1:{free_port()}"]


def _broker_conf(tmp: pathlib.Path, port: int) -> list[str]:
    props = {"storePathRootDir": str(tmp / "store"), "listenPort": str(port)}
    conf = write_broker_conf(tmp / "broker.conf", props)
    return ["broker", "-c", str(conf), "-n", f"127.0.0.1:{free_port()}"]


def _proxy(tmp: pathlib.Path, port: int) -> list[str]:
    return ["proxy", "-n", f"127.0.0.1:{free_port()}", "--grpc-port", str(port)]


CASES: dict[str, tuple[Callable[[pathlib.Path, int], list[str]], str]] = {
    "serve name server": (_serve("--namesrv-port"), "--namesrv-port"),
    "serve broker": (_serve("--broker-port"), "--broker-port"),
    "serve gRPC": (_serve("--grpc-port"), "--grpc-port"),
    "namesrv": (_namesrv, "--port"),
    "broker --port": (_broker_flag, "listenPort in broker.conf"),
    "broker listenPort": (_broker_conf, "--port"),
    "proxy": (_proxy, "--grpc-port"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_taken_port_is_one_line_naming_port_and_flag(
    case: str, taken_port: int, tmp_path: pathlib.Path
) -> None:
    make_args, flag = CASES[case]
    args = make_args(tmp_path, taken_port)
    r = run_captured([sys.executable, "-m", "rocketq.cli", *args], DEADLINE_S, env=child_env())
    assert r.returncode not in (0, None), f"{args} exited {r.returncode}: {r.stdout!r} {r.stderr!r}"
    assert "Traceback" not in r.stderr, r.stderr
    assert str(taken_port) in r.stderr and flag in r.stderr, r.stderr
    assert f"rocketq {args[0]}: error: " in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "ready" not in r.stdout


@pytest.mark.parametrize("command", ["serve", "proxy"])
def test_a_tls_mistake_is_one_line_without_the_port_hint(command: str, tmp_path: pathlib.Path) -> None:
    args = ["--grpc-port", "0", "--grpc-tls-cert", str(tmp_path / "missing.pem")]
    if command == "serve":
        args = [
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            *args,
        ]
    else:
        args = ["proxy", "-n", f"127.0.0.1:{free_port()}", *args]
    r = run_captured([sys.executable, "-m", "rocketq.cli", *args], DEADLINE_S, env=child_env())
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"rocketq {command}: error: TLS needs both" in r.stderr and "choose another port" not in r.stderr
