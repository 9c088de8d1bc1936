"""The blocking pool's idle connections without a lock: one goes to one caller and back, and
one given back while the pool closes is closed (by the give-back or by the close)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from rocketq.errors import LocalProtocolError
from rocketq.remoting.blocking import BlockingConnection, BlockingConnectionPool


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


class ClosingOnAppend(list[BlockingConnection]):
    """The idle list of an address whose next append comes right after the pool closed: the
    moment a give-back has checked the pool is open and not yet appended."""

    def __init__(self, pool: BlockingConnectionPool) -> None:
        super().__init__()
        self.pool = pool

    def append(self, conn: BlockingConnection) -> None:
        self.pool.close()
        super().append(conn)


def test_a_connection_given_back_while_the_pool_closes_is_closed(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    pool = BlockingConnectionPool(connect_timeout_s=1.0)
    conn = BlockingConnection("peer:1", pair[0])
    pool._idle["peer:1"] = ClosingOnAppend(pool)
    pool._give_back(conn)
    assert conn.closed and pool.idle_connections == 0


def test_an_idle_connection_goes_to_one_caller_and_back(pair: tuple[socket.socket, socket.socket]) -> None:
    pool = BlockingConnectionPool(connect_timeout_s=1.0)
    conn = BlockingConnection("peer:1", pair[0])
    pool._give_back(conn)
    assert pool.idle_connections == 1
    pool._idle["peer:1"].pop()  # taken
    assert pool.idle_connections == 0
    pool._give_back(conn)
    pool.close()
    assert conn.closed and pool.idle_connections == 0
    other = BlockingConnection("peer:1", pair[1])
    pool._give_back(other)  # given back after close: closed at once
    assert other.closed and pool.idle_connections == 0


def test_a_pool_with_an_rpc_hook_refuses_a_frame_the_hook_did_not_sign() -> None:
    pool = BlockingConnectionPool(connect_timeout_s=1.0, rpc_hook=lambda addr, cmd: None)
    with pytest.raises(LocalProtocolError, match="cannot be signed"):
        pool.invoke_frame("127.0.0.1:1", b"frame", 1, 310, 1.0)
