"""RocketMQ remoting protocol: codes, commands, the sans-IO frame codec and asyncio transports.

Layering (each module imports only the ones above it)::

    codes.py      numbers: request/language codes, flag bits, serialize types, limits, versions
    command.py    RemotingCommand + JSON / ROCKETMQ header encode and tolerant decode (pure)
    codec.py      frames: FrameDecoder.feed(bytes) -> [RemotingCommand], encode(cmd) -> bytes (pure)
    connection.py Connection: the asyncio.Protocol either end runs (dispatch, back-pressure)
    server.py     RemotingServer: accepts connections, runs the request handler
    client.py     RemotingClient: one lazily opened connection per address
    timer_selector.py  asyncio's epoll selector with untimed waits: the next timer is a timerfd
    eventloop.py  which loop the server commands run on (asyncio, or uvloop on request)
"""

from __future__ import annotations

from rocketq.remoting.client import RemotingClient
from rocketq.remoting.codec import FrameDecoder, encode
from rocketq.remoting.codes import (
    CURRENT_VERSION,
    DEFAULT_LANGUAGE,
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    RPC_ONEWAY,
    RPC_TYPE,
    LanguageCode,
    RequestCode,
    SerializeType,
    Version,
)
from rocketq.remoting.command import RemotingCommand, create_request, create_response
from rocketq.remoting.connection import Connection, RequestHandler
from rocketq.remoting.server import RemotingServer

__all__ = [
    "CURRENT_VERSION",
    "DEFAULT_LANGUAGE",
    "DEFAULT_MAX_FRAME_SIZE",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "RPC_ONEWAY",
    "RPC_TYPE",
    "Connection",
    "FrameDecoder",
    "LanguageCode",
    "RemotingClient",
    "RemotingCommand",
    "RemotingServer",
    "RequestCode",
    "RequestHandler",
    "SerializeType",
    "Version",
    "create_request",
    "create_response",
    "encode",
]
