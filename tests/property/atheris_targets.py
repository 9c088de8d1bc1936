"""Coverage-guided fuzzing of the decoders with atheris (libFuzzer), beside the Hypothesis fuzz
tests: one target whose first byte picks the decoder, each allowed only its documented errors
(the same contracts as tests/property/test_fuzz_*.py). test_fuzz_atheris.py runs it for a few
seconds when atheris is installed (``pip install atheris``; Linux wheels for CPython 3.11);
run it longer by hand::

    python tests/property/atheris_targets.py -max_total_time=600 -max_len=4096

A crash (any other exception) stops the run with the input written to ``crash-<sha1>`` (or
under ``-artifact_prefix=DIR/``); replay it with ``python tests/property/atheris_targets.py FILE``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import atheris  # type: ignore[import-not-found]

with atheris.instrument_imports(include=["rocketq"]):
    from rocketq.acl.address import compile_address_pattern
    from rocketq.acl.plain import parse_plain_acl
    from rocketq.errors import BodyFormatError, ConfigError, MessageIllegal, RemoteProtocolError
    from rocketq.properties import parse_properties
    from rocketq.protocol import fastjson
    from rocketq.protocol.batch import decode_batch
    from rocketq.protocol.heartbeat import parse_heartbeat
    from rocketq.protocol.record import decode_record
    from rocketq.remoting import FrameDecoder
    from rocketq.remoting.command import decode_json_header, decode_rocketmq_header


def _frames(data: bytes) -> None:
    decoder = FrameDecoder(max_frame_size=1 << 16)
    try:
        for at in range(0, len(data), 7):
            decoder.feed(data[at : at + 7])
    except RemoteProtocolError:
        pass


def _headers(data: bytes) -> None:
    for decode in (decode_json_header, decode_rocketmq_header):
        try:
            decode(data)
        except RemoteProtocolError:
            pass


def _record(data: bytes) -> None:
    decode_record(data, 0, check_crc=True, verify_prop_crc=True)


def _batch(data: bytes) -> None:
    try:
        decode_batch(data)
    except MessageIllegal:
        pass


def _json(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    for read in (fastjson.loads, fastjson.loads_object_keys):
        try:
            read(text)
        except ValueError:
            pass
    try:
        fastjson.loads_body(data, "fuzzed")
    except BodyFormatError:
        pass
    try:
        parse_heartbeat(data)
    except ValueError:
        pass


def _texts(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    parse_properties(text)
    for parse in (parse_plain_acl, compile_address_pattern):
        try:
            result = parse(text)
        except ConfigError:
            continue
        if callable(result):
            result(text)


TARGETS: tuple[Callable[[bytes], None], ...] = (_frames, _headers, _record, _batch, _json, _texts)


def one_input(data: bytes) -> None:
    if data:
        TARGETS[data[0] % len(TARGETS)](data[1:])


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
