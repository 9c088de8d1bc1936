"""Blocking remoting calls (rocketq.remoting.blocking) against a real socket server on 127.0.0.1
whose behaviour each test scripts: stray responses and server requests are handled, timeouts
leave the connection usable, a closed peer fails the call, the pool hands out one connection
per concurrent caller."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from _support.wait import wait_until
from rocketq.errors import ConnectionClosed, RemotingTimeout, ResponseCode
from rocketq.remoting import RemotingCommand, RequestCode, blocking, create_request
from rocketq.remoting.blocking import BlockingConnection, BlockingConnectionPool
from rocketq.remoting.codec import FrameDecoder, encode
from rocketq.remoting.codes import FLAG_RESPONSE


def read_one(sock: socket.socket, decoder: FrameDecoder, pending: list[RemotingCommand]) -> RemotingCommand:
    while not pending:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("client closed")
        pending.extend(decoder.feed(data))
    return pending.pop(0)


class Server:
    """Accepts connections; each is served by ``script(conn, read)`` in its own thread."""

    def __init__(self, script: Callable[[socket.socket, Callable[[], RemotingCommand]], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.script = script
        self.accepted = 0
        self.threads: list[threading.Thread] = []
        self.seen: list[RemotingCommand] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)  # before it starts: a test may look for it once it answered
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        pending: list[RemotingCommand] = []

        def read() -> RemotingCommand:
            cmd = read_one(conn, decoder, pending)
            self.seen.append(cmd)
            return cmd

        try:
            self.script(conn, read)
        except (ConnectionError, OSError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def make_server() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def make(script: Callable[[socket.socket, Callable[[], RemotingCommand]], None]) -> Server:
        s = Server(script)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def ok(request: RemotingCommand, remark: str = "") -> bytes:
    return encode(RemotingCommand.create_response(request, ResponseCode.SUCCESS, remark))


def test_stray_response_and_server_request_then_the_answer(make_server: Callable[..., Server]) -> None:
    def script(conn: socket.socket, read: Callable[[], RemotingCommand]) -> None:
        request = read()
        stray = RemotingCommand(0, opaque=request.opaque + 1000, flag=FLAG_RESPONSE)
        ask = create_request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G"})
        conn.sendall(encode(stray) + encode(ask))
        refusal = read()
        assert refusal.opaque == ask.opaque and refusal.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        conn.sendall(ok(request, "the answer"))
        while True:
            conn.sendall(ok(read()))

    server = make_server(script)
    conn = BlockingConnection.open(server.addr, 2.0)
    try:
        response = conn.invoke(create_request(RequestCode.HEART_BEAT), 5.0)
        assert response.code == ResponseCode.SUCCESS and response.remark == "the answer"
        assert conn.invoke(create_request(RequestCode.HEART_BEAT), 5.0).code == ResponseCode.SUCCESS
    finally:
        conn.close()


def test_timeout_keeps_the_connection_and_drops_the_late_answer(make_server: Callable[..., Server]) -> None:
    release = threading.Event()

    def script(conn: socket.socket, read: Callable[[], RemotingCommand]) -> None:
        first = read()
        assert release.wait(10)
        conn.sendall(ok(first, "late"))
        while True:
            conn.sendall(ok(read(), "on time"))

    server = make_server(script)
    conn = BlockingConnection.open(server.addr, 2.0)
    try:
        with pytest.raises(RemotingTimeout):
            conn.invoke(create_request(RequestCode.HEART_BEAT), 0.2)
        assert not conn.closed
        release.set()
        response = conn.invoke(create_request(RequestCode.HEART_BEAT), 5.0)
        assert response.remark == "on time"
    finally:
        conn.close()


def test_peer_close_fails_the_call_and_closes(make_server: Callable[..., Server]) -> None:
    def script(conn: socket.socket, read: Callable[[], RemotingCommand]) -> None:
        read()  # then close without answering

    server = make_server(script)
    conn = BlockingConnection.open(server.addr, 2.0)
    with pytest.raises(ConnectionClosed):
        conn.invoke(create_request(RequestCode.HEART_BEAT), 5.0)
    assert conn.closed
    with pytest.raises(ConnectionClosed):
        conn.invoke(create_request(RequestCode.HEART_BEAT), 5.0)


def test_pool_one_connection_per_concurrent_caller_and_hook(make_server: Callable[..., Server]) -> None:
    inside = threading.Barrier(3)

    def script(conn: socket.socket, read: Callable[[], RemotingCommand]) -> None:
        while True:
            request = read()
            if request.ext_fields.get("wait") == "yes":
                inside.wait(10)
            conn.sendall(ok(request))

    server = make_server(script)
    hooked: list[str] = []
    pool = BlockingConnectionPool(connect_timeout_s=2.0, rpc_hook=lambda addr, cmd: hooked.append(addr))
    errors: list[BaseException] = []

    def call() -> None:
        try:
            pool.invoke(server.addr, create_request(RequestCode.HEART_BEAT, {"wait": "yes"}), 10.0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and server.accepted == 3 and pool.idle_connections == 3
    assert hooked == [server.addr] * 3
    # one caller at a time reuses an idle connection
    for _ in range(5):
        assert pool.invoke(server.addr, create_request(RequestCode.HEART_BEAT), 5.0).code == 0
    assert server.accepted == 3
    pool.close()
    assert pool.idle_connections == 0
    with pytest.raises(ConnectionClosed):
        pool.invoke(server.addr, create_request(RequestCode.HEART_BEAT), 5.0)


def test_a_frame_larger_than_the_socket_buffer_is_written_whole(make_server: Callable[..., Server]) -> None:
    body = bytes(range(256)) * (16 * 1024)  # 4 MiB: more than the kernel takes in one send

    def script(conn: socket.socket, read: Callable[[], RemotingCommand]) -> None:
        while True:
            request = read()
            conn.sendall(ok(request, f"{len(request.body)} {request.body == body}"))

    server = make_server(script)
    conn = BlockingConnection.open(server.addr, 2.0, max_frame_size=8 * 1024 * 1024)
    try:
        for _ in range(2):
            response = conn.invoke(create_request(RequestCode.SEND_MESSAGE_V2, body=body), 10.0)
            assert response.remark == f"{len(body)} True"
    finally:
        conn.close()


def test_a_write_the_peer_does_not_take_times_out(make_server: Callable[..., Server]) -> None:
    release = threading.Event()

    def script(conn: socket.socket, read: Callable[[], RemotingCommand]) -> None:
        assert release.wait(10)  # reads nothing until the client gave up

    server = make_server(script)
    big = b"x" * (32 * 1024 * 1024)  # more than both sockets' buffers hold
    conn = BlockingConnection.open(server.addr, 2.0, max_frame_size=64 * 1024 * 1024)
    try:
        with pytest.raises(RemotingTimeout, match=r"within 0\.3 s"):
            conn.invoke(create_request(RequestCode.SEND_MESSAGE_V2, body=big), 0.3)
    finally:
        release.set()
        conn.close()


def test_a_read_times_out_at_its_own_deadline_whatever_the_calls_before(
    make_server: Callable[..., Server],
) -> None:
    release = threading.Event()

    def script(conn: socket.socket, read: Callable[[], RemotingCommand]) -> None:
        conn.sendall(ok(read()))  # the first call is answered at once
        second = read()
        assert release.wait(10)  # the second only once the client gave up on it
        conn.sendall(ok(second, "late"))
        while True:
            conn.sendall(ok(read(), "on time"))

    server = make_server(script)
    conn = BlockingConnection.open(server.addr, 2.0)
    try:
        # A long deadline first (the read's receive timeout is set from it), then a short one:
        # the short call still times out at its own deadline, not the long one's slice.
        assert conn.invoke(create_request(RequestCode.HEART_BEAT), 60.0).code == ResponseCode.SUCCESS
        began = time.monotonic()
        with pytest.raises(RemotingTimeout, match=r"within 0\.3 s"):
            conn.invoke(create_request(RequestCode.HEART_BEAT), 0.3)
        elapsed = time.monotonic() - began
        assert 0.3 <= elapsed < 2.0, elapsed
        release.set()
        assert conn.invoke(create_request(RequestCode.HEART_BEAT), 60.0).remark == "on time"
    finally:
        conn.close()


def test_a_quick_answer_is_tried_only_on_an_idle_read_and_none_decodes_it(
    make_server: Callable[..., Server],
) -> None:
    """``quick`` sees each read made while nothing is buffered, with the call's opaque, its
    extra arguments and the frame limit; what it makes is returned, and a None has the read
    decoded as usual. A read that completes a frame begun in an earlier one is not handed to it."""
    split = threading.Event()
    first_half_read = threading.Event()

    def script(conn: socket.socket, read: Callable[[], RemotingCommand]) -> None:
        while True:
            answer = ok(read(), "whole")
            if split.is_set():
                conn.sendall(answer[:5])
                assert first_half_read.wait(10)  # the client has read the first half alone
                conn.sendall(answer[5:])
            else:
                conn.sendall(answer)

    server = make_server(script)
    conn = BlockingConnection.open(server.addr, 2.0)
    seen: list[tuple[bytes, int, tuple[object, ...]]] = []

    def quick(buf: bytearray, n: int, opaque: int, *rest: object) -> str | None:
        seen.append((bytes(buf[:n]), opaque, rest))
        if n == 5:
            first_half_read.set()
        return "made" if rest[0] == "make" else None

    def call(word: str) -> object:
        request = create_request(RequestCode.HEART_BEAT)
        answer = conn.invoke_frame(encode(request), request.opaque, request.code, 5.0, quick, (word,))
        assert seen[-1][1] == request.opaque and seen[-1][2] == (word, conn._max_frame_size)
        return answer

    try:
        assert call("make") == "made"
        assert FrameDecoder().feed(seen[-1][0])[0].remark == "whole"
        response = call("no")
        assert isinstance(response, RemotingCommand) and response.remark == "whole"
        split.set()
        before = len(seen)
        response = call("no")
        assert isinstance(response, RemotingCommand) and response.remark == "whole"
        assert [len(b) for b, _, _ in seen[before:]] == [5]  # the rest was read with 5 B buffered
    finally:
        conn.close()


def test_an_idle_connection_whose_peer_closed_it_is_not_used(
    make_server: Callable[..., Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooled connection the server closed while it sat idle (a broker restarted) is seen
    closed when it is taken again after ``IDLE_CHECK_AFTER_S``, and the call goes out on a new
    one instead of failing with ConnectionClosed; one still open is used again."""

    def script(conn: socket.socket, read: Callable[[], RemotingCommand]) -> None:
        while True:
            request = read()
            conn.sendall(ok(request))
            if request.ext_fields.get("last") == "yes":
                return  # closed after this answer, as a broker that goes away

    server = make_server(script)
    pool = BlockingConnectionPool(connect_timeout_s=2.0)
    monkeypatch.setattr(blocking, "IDLE_CHECK_AFTER_S", 0.0)  # every idle connection is looked at
    try:
        assert pool.invoke(server.addr, create_request(RequestCode.HEART_BEAT), 5.0).code == 0
        assert pool.invoke(server.addr, create_request(RequestCode.HEART_BEAT), 5.0).code == 0
        assert server.accepted == 1  # still open: used again
        last = create_request(RequestCode.HEART_BEAT, {"last": "yes"})
        assert pool.invoke(server.addr, last, 5.0).code == 0
        wait_until(lambda: not server.threads[0].is_alive(), "the server closing the connection", 10)
        assert pool.invoke(server.addr, create_request(RequestCode.HEART_BEAT), 5.0).code == 0
        assert server.accepted == 2
    finally:
        pool.close()
