"""The compiled codecs of the broker's send path (``rocketq._speedups``: parse_frames,
decode_json_header, decode_send_header, sent_properties, send_ok_frame, put_record) against their
pure-Python references, on the same inputs: the same value (types included), or the same
exception with the same text, for well-formed and malformed input alike (skipped, saying why,
when the compiled module is not in use)."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from _support.record_cases import CRCS, I64, STORE_HOSTS, TOPICS, broker_message, mostly
from rocketq import speedups
from rocketq.broker import send, send_frame, send_properties
from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage
from rocketq.protocol import headers
from rocketq.protocol.headers import SEND_V2_TO_V1
from rocketq.protocol.record import MESSAGE_MAGIC_CODE, record_layout
from rocketq.remoting import codec, command
from rocketq.remoting.codec import FrameDecoder, encode
from rocketq.remoting.codes import DEFAULT_MAX_FRAME_SIZE, LanguageCode, SerializeType
from rocketq.remoting.command import RemotingCommand, encode_json_header
from rocketq.store import commitlog as commitlog_module
from rocketq.store.commitlog import PutMessageResult, PutMessageStatus
from rocketq.store.message_store import MessageStore

pytestmark = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)

NOW_MS = 1_800_000_000_000


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "value", fn(*args, **kwargs)
    except Exception as exc:  # the same exception type and message both ways
        return type(exc).__name__, str(exc)


def typed(value: Any) -> Any:
    """``value`` with the type of every part spelled out (True == 1, but not here)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, [typed(getattr(value, f.name)) for f in dataclasses.fields(value)])
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])  # order counts
    if isinstance(value, tuple):
        return ("tuple", [typed(v) for v in value])
    return (type(value).__name__, value)


# -- decode_send_header ------------------------------------------------------------------------
numbers = st.one_of(
    st.integers(-(1 << 64), 1 << 64).map(str),
    st.integers(0, 10**20).map(lambda n: f"{n:020d}"),
    st.integers(0, 10**19).map(str),
    st.sampled_from(
        ["", "-", "+1", " 1", "1 ", "1_0", "٣", "0x10", "00", "007", "2147483647", "2147483648", "-1"]
    ),
    st.sampled_from(["9223372036854775807", "9223372036854775808", "999999999", "1000000000"]),
    st.sampled_from(["999999999999999999", "1000000000000000000", "1700000000000"]),
)
booleans = st.sampled_from(["true", "false", "TRUE", " true ", "yes", "", "False", "fals"])
texts = st.text(max_size=12)
odd_values = st.sampled_from([None, 1, 1.5, True, b"1", ["1"]])


@st.composite
def send_fields(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    v2 = draw(st.booleans())
    values: dict[str, st.SearchStrategy[Any]] = {
        "producerGroup": texts,
        "topic": texts,
        "defaultTopic": texts,
        "defaultTopicQueueNums": numbers,
        "queueId": numbers,
        "sysFlag": numbers,
        "bornTimestamp": numbers,
        "flag": numbers,
        "properties": texts,
        "reconsumeTimes": numbers,
        "unitMode": booleans,
        "maxReconsumeTimes": numbers,
        "batch": booleans,
        "brokerName": texts,
    }
    ext: dict[str, Any] = {}
    for v2_key, name in SEND_V2_TO_V1.items():
        if draw(st.integers(0, 5)) > 0:
            value = draw(values[name]) if draw(st.integers(0, 30)) else draw(odd_values)
            ext[v2_key if v2 else name] = value
    if draw(st.integers(0, 8)) == 0:  # a key of the other form, or one of neither
        ext[draw(st.sampled_from(["topic", "b", "queueId", "e", "x"]))] = draw(numbers)
    return ext, v2


def header_outcome(decode: Callable[..., Any], ext: dict[str, Any], v2: bool) -> Any:
    got = outcome(decode, ext, v2=v2)
    # an absent born timestamp, or a None one, is "now": the two calls may read different ms
    if got[0] == "value" and ext.get("g" if v2 else "bornTimestamp") is None:
        got = ("value", dataclasses.replace(got[1], born_timestamp=NOW_MS))
    return typed(got)


@settings(max_examples=examples(1000), deadline=None)
@given(send_fields())
def test_decode_send_header_agrees(case: tuple[dict[str, Any], bool]) -> None:
    ext, v2 = case
    compiled = header_outcome(headers.decode_send_header, ext, v2)
    assert compiled == header_outcome(headers.pure_decode_send_header, ext, v2)


def test_decode_send_header_is_compiled_and_takes_a_java_producers_header() -> None:
    assert headers.decode_send_header is speedups.COMPILED.decode_send_header  # type: ignore[union-attr]
    ext = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000123", "h": "0",
           "i": "UNIQ_KEY\x01AB\x02", "j": "0", "k": "false", "l": "16", "m": "false"}  # fmt: skip
    header = headers.decode_send_header(ext, v2=True)
    assert typed(header) == typed(headers.pure_decode_send_header(ext, v2=True))
    assert (header.queue_id, header.born_timestamp, header.max_reconsume_times) == (3, 1700000000123, 16)


def test_decode_send_header_unusual_calls_are_answered_as_the_pure_function_answers() -> None:
    ext = {"b": "T", "e": "0", "g": "1"}
    mapping = type("M", (dict,), {})(ext)  # a dict subclass: the pure path
    for args, kwargs in [
        ((ext,), {}),
        ((ext, True), {}),
        ((), {"ext": ext, "v2": True}),
        ((ext,), {"w": 1}),
        ((ext,), {"v2": 1}),
        ((ext,), {"".join(["v", "2"]): True}),  # a keyword name that is not the interned one
        ((mapping,), {"v2": True}),
        (("b",), {"v2": True}),
    ]:
        compiled = typed(outcome(headers.decode_send_header, *args, **kwargs))
        assert compiled == typed(outcome(headers.pure_decode_send_header, *args, **kwargs)), (args, kwargs)


# -- sent_properties ---------------------------------------------------------------------------
prop_chars = st.sampled_from(["\x01", "\x02", "a", "K", "é", "中", "\ud800", " ", "="])
prop_names = st.sampled_from(["UNIQ_KEY", "POP_CK", "CLUSTER", "TAGS", "KEYS", "WAIT", "DELAY", "TRAN_MSG"])


@st.composite
def property_texts(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.lists(prop_chars, max_size=40).map("".join))
    if kind == 1:
        return draw(st.sampled_from([None, "", b"a\x01b\x02", 7]))
    pairs = draw(
        st.lists(
            st.tuples(prop_names | st.text("abc\x01", max_size=4), st.text("xyz\x01é", max_size=6)),
            max_size=6,
        )
    )
    text = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text


clusters = st.sampled_from(["DefaultCluster", "", "c\x01x", "c\x02", "集群", "\ud800", "x" * 300])


class Ids:
    """new_id: ids as a generator would give them, or odd values; counts its calls."""

    def __init__(self, kind: int) -> None:
        self.kind = kind
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        if self.kind == 1:
            return f"7F00000100002A9F000000000000{self.calls:04X}\x01"
        if self.kind == 2:
            return None
        if self.kind == 3:
            raise RuntimeError("no id")
        if self.kind == 4:
            return "é"
        return f"7F00000100002A9F0000000000{self.calls:06X}"


@settings(max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(property_texts(), clusters, st.sampled_from([0, 0, 0, 1, 2, 3, 4]))
def test_sent_properties_agrees(text: Any, cluster: str, id_kind: int) -> None:
    compiled_ids, pure_ids = Ids(id_kind), Ids(id_kind)
    compiled = outcome(send_properties.sent_properties, text, cluster, compiled_ids)
    pure = outcome(send_properties.pure_sent_properties, text, cluster, pure_ids)
    assert typed(compiled) == typed(pure)
    assert compiled_ids.calls == pure_ids.calls


def test_sent_properties_is_compiled_and_keeps_what_a_client_sent() -> None:
    assert send_properties.sent_properties is speedups.COMPILED.sent_properties  # type: ignore[union-attr]
    text = "KEYS\x01k1 k2\x02UNIQ_KEY\x01AB01\x02WAIT\x01true\x02TAGS\x01A\x02POP_CK\x01ck\x02"
    props, encoded = send_properties.sent_properties(text, "C1", Ids(3))  # no id asked for
    assert list(props.items()) == [
        ("KEYS", "k1 k2"), ("UNIQ_KEY", "AB01"), ("WAIT", "true"), ("TAGS", "A"), ("CLUSTER", "C1"),
    ]  # fmt: skip
    assert encoded == b"KEYS\x01k1 k2\x02UNIQ_KEY\x01AB01\x02WAIT\x01true\x02TAGS\x01A\x02CLUSTER\x01C1\x02"
    props, encoded = send_properties.sent_properties(None, "C1", Ids(0))
    assert encoded == b"UNIQ_KEY\x017F00000100002A9F0000000000000001\x02CLUSTER\x01C1\x02"
    _props, encoded = send_properties.sent_properties("a\x01b\x01c\x02", "C1", Ids(0))
    assert encoded is None  # "b\x01c" is a value encode_properties refuses


# -- send_ok_frame -----------------------------------------------------------------------------
I32 = st.integers(-(2**31), 2**31 - 1)
json_texts = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["DefaultRegion", "", 'a"b', "a\\b", "\x7f", "\x1f", "é", "x" * 300, "\ud800"]),
)


@st.composite
def put_results(draw: st.DrawFn) -> Any:
    host = draw(
        st.one_of(
            st.binary(min_size=8, max_size=8),
            st.binary(min_size=20, max_size=20),
            st.binary(max_size=24),
            st.sampled_from([None, bytearray(8)]),
        )
    )
    offset = draw(st.one_of(st.integers(0, 2**50), st.integers(-(2**64), 2**64)))
    batch = draw(st.one_of(st.none(), st.lists(st.integers(0, 2**50), min_size=1, max_size=4)))
    queue_offset = draw(st.one_of(st.integers(0, 2**62), st.integers(-(2**70), 2**70), st.just(True)))
    result = PutMessageResult.of(
        PutMessageStatus.PUT_OK, offset, 100, queue_offset, 0, host, 1 if batch is None else len(batch), batch
    )
    return result if draw(st.integers(0, 20)) else tuple(result)


@settings(max_examples=examples(1000), deadline=None)
@given(
    st.one_of(I32, st.integers(-(2**70), 2**70), st.just(False)),
    put_results(),
    st.one_of(st.integers(0, 1023), st.integers(-(2**70), 2**70), st.just(True)),
    st.one_of(st.none(), json_texts, st.just(5)),
    st.one_of(json_texts, st.just(None)),
    st.one_of(st.booleans(), st.sampled_from([0, 1, "", "x", None])),
)
def test_send_ok_frame_agrees(
    opaque: Any, result: Any, queue_id: Any, transaction_id: Any, region: Any, trace_on: Any
) -> None:
    args = (opaque, result, queue_id, transaction_id, region, trace_on)
    assert typed(outcome(send.send_ok_frame, *args)) == typed(outcome(send.pure_send_ok_frame, *args))


def test_send_ok_frame_is_compiled_and_writes_the_usual_answer() -> None:
    assert send.send_ok_frame is speedups.COMPILED.send_ok_frame  # type: ignore[union-attr]
    host = bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    result = PutMessageResult.of(PutMessageStatus.PUT_OK, 4096, 200, 17, 0, host)
    frame = send.send_ok_frame(42, result, 3, "7F0000010000AB", "DefaultRegion", False)
    assert frame == send.pure_send_ok_frame(42, result, 3, "7F0000010000AB", "DefaultRegion", False)
    assert b'"msgId":"7F00000100002A9F0000000000001000"' in frame


def test_unusual_arguments_take_the_pure_path_and_its_errors() -> None:
    def calls() -> Iterator[tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...]]]:
        yield send_properties.sent_properties, send_properties.pure_sent_properties, ("a\x01b\x02",)
        yield send_properties.sent_properties, send_properties.pure_sent_properties, ()
        yield send.send_ok_frame, send.pure_send_ok_frame, (1, None, 0, None, "R")
        yield send.send_ok_frame, send.pure_send_ok_frame, (1, ("x",) * 8, 0, None, "R", True)

    for compiled, pure, args in calls():
        assert outcome(compiled, *args) == outcome(pure, *args)


# -- decode_json_header ------------------------------------------------------------------------
json_pieces = st.sampled_from(
    [
        '"code":310', '"code":-0', '"code":007', '"code":1.5', '"code":1e3', '"code":"12"', '"code":null',
        '"code":123456789012345678', '"code":1234567890123456789', '"flag":0', '"flag":true', '"opaque":-7',
        '"version":475', '"language":"JAVA"', '"language":"GO"', '"language":"KLINGON"', '"language":3',
        '"remark":null', '"remark":"r\\u00e9"', '"remark":"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t"', '"remark":5',
        '"serializeTypeCurrentRPC":"JSON"', '"serializeTypeCurrentRPC":0', '"unknown":[1,{"a":2}]',
        '"extFields":{}', '"extFields":{"a":"b","a":"c"}', '"extFields":{"i":"K\\u0001V\\u0002"}',
        '"extFields":{"n":15000,"b":false,"z":null}', '"extFields":[]', '"extFields":{"x":"\\ud83d\\ude00"}',
        '"extFields":{"x":"\\u12"}', '"extFields":{"x":"\\q"}', '"extFields":{"x":"\x01"}', '"extFields":"s"',
        ' "code" : 1 ', '"code":1,', '"code"', '"code":', '"c\\u006fde":5', '"extFields":{"k":"v"',
    ]
)  # fmt: skip


@st.composite
def json_headers(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 4))
    if kind in (0, 4):  # what a client writes, any command (ASCII text, or any)
        text = st.text(st.characters(max_codepoint=127), max_size=12) if kind == 0 else st.text(max_size=12)
        cmd = RemotingCommand(
            draw(st.integers(-(2**31), 2**31 - 1)),
            draw(st.sampled_from(list(LanguageCode))),
            draw(st.integers(0, 1000)),
            draw(st.integers(-(2**31), 2**31 - 1)),
            draw(st.integers(0, 3)),
            draw(st.none() | text),
            draw(st.dictionaries(text, text, max_size=5)),
        )
        raw = encode_json_header(cmd)
    else:
        pieces = draw(st.lists(json_pieces, max_size=7))
        raw = ("{" + ",".join(pieces) + "}").encode()
    if kind == 3 and raw:  # a byte changed, cut or added
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + draw(st.binary(max_size=2)) + raw[at + draw(st.integers(0, 2)) :]
    return raw


@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_headers(), st.binary(max_size=4))
def test_decode_json_header_agrees(header: bytes, body: bytes) -> None:
    compiled = outcome(command.decode_json_header, header, body)
    assert typed(compiled) == typed(outcome(command.pure_decode_json_header, header, body))


def test_decode_json_header_is_compiled_and_takes_a_java_send() -> None:
    assert command.decode_json_header is speedups.COMPILED.decode_json_header  # type: ignore[union-attr]
    ext = {"a": "PG", "b": "T", "e": "3", "i": "TAGS\x01A\x02UNIQ_KEY\x01AB\x02"}
    raw = encode_json_header(RemotingCommand(310, opaque=9, ext_fields=ext))
    assert b"\\u0001" in raw
    cmd = command.decode_json_header(raw, b"body")
    assert typed(cmd) == typed(command.pure_decode_json_header(raw, b"body"))
    assert (cmd.code, cmd.opaque, cmd.ext_fields, cmd.body) == (310, 9, ext, b"body")
    for args in [(raw,), (bytearray(raw),), (raw, bytearray(b"x")), ("text",), (), (raw, b"", 1)]:
        assert typed(outcome(command.decode_json_header, *args)) == typed(
            outcome(command.pure_decode_json_header, *args)
        )


# -- put_record --------------------------------------------------------------------------------
@st.composite
def put_cases(draw: st.DrawFn) -> tuple[Any, ...]:
    msg = broker_message(draw, mostly(draw, st.sampled_from([0, 1, 0x100, 0x7FFFFFFF, -1])))
    topic = draw(TOPICS)
    store_host = draw(STORE_HOSTS)
    length = 64 + len(store_host) + 16 + len(msg.body) + 1 + len(topic) + 2 + len(msg.properties)
    length += draw(st.sampled_from([0, 0, 0, 1, -1]))
    crc = draw(CRCS)
    store_v6 = draw(st.sampled_from([0, 0x20]))
    pos = draw(st.integers(0, 16))
    size = pos + length + draw(st.sampled_from([0, 5, -1]))
    return msg, topic, store_host, length, crc, draw(I64), draw(I64), store_v6, draw(I64), pos, size


@settings(max_examples=examples(1000), deadline=None)
@given(put_cases())
def test_put_record_writes_the_layouts_bytes_or_nothing(case: tuple[Any, ...]) -> None:
    msg, topic, store_host, length, crc, qoff, physical, store_v6, now, pos, size = case
    target = bytearray(b"\xee" * max(size, 0))
    written = commitlog_module._put_record(  # type: ignore[misc]
        target, pos, length, msg, crc, qoff, physical, store_v6, now, store_host, topic
    )
    expected = bytearray(b"\xee" * max(size, 0))
    try:
        fmt = record_layout(8, len(store_host), False, len(msg.body), len(topic), len(msg.properties))
        fmt.pack_into(
            expected, pos, length, MESSAGE_MAGIC_CODE, crc, msg.queue_id, msg.flag, qoff, physical,
            msg.sys_flag | store_v6, msg.born_timestamp, msg.born_host, now, store_host, msg.reconsume_times,
            msg.prepared_transaction_offset, len(msg.body), msg.body, len(topic), topic,
            len(msg.properties), msg.properties,
        )  # fmt: skip
        packs = fmt.size == length and len(msg.born_host) == 8
    except (struct.error, TypeError):
        packs = False
    if written:
        assert packs and target == expected
    else:  # nothing written: the layout packs it (or fails) on the caller's path
        assert target == bytearray(b"\xee" * max(size, 0))
        types_ok = all(
            type(v) is int
            for v in (msg.queue_id, msg.flag, msg.sys_flag, msg.born_timestamp, msg.reconsume_times,
                      msg.prepared_transaction_offset)
        )  # fmt: skip
        assert not (packs and types_ok and len(topic) <= 127)


def test_a_store_put_writes_the_record_the_pure_path_writes(tmp_path: Path) -> None:
    """The same puts through CommitLog.put_message compiled and pure: the same records (but the
    store timestamp), and a flag outside int32 refused by both with the layout's error."""
    msg = BrokerMessage("TopicA", b"payload", b"UNIQ_KEY\x01AB\x02", 2, 7, 0, 1700000000000, bytes(range(8)))
    seen = []
    saved = commitlog_module._put_record
    for name, put in (("compiled", saved), ("pure", None)):
        commitlog_module._put_record = put
        try:
            cfg = StoreConfig(store_path_root_dir=str(tmp_path / name), mapped_file_size_commit_log=1 << 20)
            with MessageStore(cfg) as store:
                results = [store.put_message(dataclasses.replace(msg, queue_id=q)) for q in (2, 2, 3)]
                raws = [store.commitlog.read(r.physical_offset, r.size) for r in results]
                bad = outcome(store.put_message, dataclasses.replace(msg, flag=2**31))
                after = store.put_message(dataclasses.replace(msg))
        finally:
            commitlog_module._put_record = saved
        seen.append(
            (
                [raw[:56] + raw[64:] for raw in raws if raw is not None],
                [(r.physical_offset, r.queue_offset) for r in results],
                bad,
                (after.physical_offset, after.queue_offset),
            )
        )
    assert seen[0] == seen[1]
    assert len(seen[0][0]) == 3 and seen[0][2][0] == "error"  # struct.error


# -- FrameDecoder's loop -----------------------------------------------------------------------
@st.composite
def frame_streams(draw: st.DrawFn) -> tuple[bytes, list[int], int]:
    frames = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 6))
        cmd = RemotingCommand(
            draw(st.integers(0, 400)),
            opaque=draw(st.integers(0, 2**31 - 1)),
            ext_fields=draw(
                st.dictionaries(st.text("abe\x01é", max_size=3), st.text("xy\x02", max_size=5), max_size=3)
            ),
            body=draw(st.binary(max_size=6)),
            serialize_type=SerializeType.ROCKETMQ if kind == 1 else SerializeType.JSON,
        )
        frame = bytearray(encode(cmd))
        if kind == 2:  # a length out of bounds
            frame[:4] = struct.pack(">i", draw(st.sampled_from([-1, 0, 3, 2**31 - 1, 70])))
        elif kind == 3:  # a header length beyond the frame, or an unknown serialize type
            frame[4:8] = struct.pack(">I", draw(st.sampled_from([0xFFFF, 9 << 24 | 5, 2 << 24])))
        elif kind == 4 and len(frame) > 9:  # a damaged header byte
            frame[draw(st.integers(8, len(frame) - 1))] = draw(st.integers(0, 255))
        frames.append(bytes(frame))
    stream = b"".join(frames)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    return stream, cuts, draw(st.sampled_from([DEFAULT_MAX_FRAME_SIZE, 64]))


def feed_all(stream: bytes, cuts: list[int], max_frame: int) -> list[Any]:
    decoder = FrameDecoder(max_frame)
    seen = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        seen.append(typed(outcome(decoder.feed, stream[a:b])))
        seen.append((decoder.buffered, decoder.failed, decoder._need))
        assert decoder.idle is (not decoder.buffered and not decoder.failed)
    return seen


@settings(max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame_streams())
def test_frame_decoder_loop_agrees(case: tuple[bytes, list[int], int]) -> None:
    stream, cuts, max_frame = case
    compiled = feed_all(stream, cuts, max_frame)
    saved = codec._parse_frames
    codec._parse_frames = None  # type: ignore[misc]
    try:
        pure = feed_all(stream, cuts, max_frame)
    finally:
        codec._parse_frames = saved  # type: ignore[misc]
    assert compiled == pure


def test_decode_send_header_survives_a_key_whose_comparison_changes_the_fields() -> None:
    """A key of another type colliding with a field's name runs Python code in the lookup; one
    that empties the dict there leaves the decoder with the values it read (held, not freed)."""

    class Colliding:
        def __init__(self, ext: dict[Any, Any]) -> None:
            self.ext = ext

        def __hash__(self) -> int:
            return hash("n")

        def __eq__(self, other: object) -> bool:
            self.ext.clear()
            return False

    def fresh() -> dict[Any, Any]:
        ext: dict[Any, Any] = {"a": "PG" * 20, "b": "T" * 30, "e": "1", "g": "1700000000000"}
        ext[Colliding(ext)] = "x"
        return ext

    compiled = typed(outcome(headers.decode_send_header, fresh(), v2=True))
    assert compiled == typed(outcome(headers.pure_decode_send_header, fresh(), v2=True))


# -- lone_send -----------------------------------------------------------------------------------
@st.composite
def lone_frames(draw: st.DrawFn) -> tuple[bytes, int, bool]:
    """A read's bytes: mostly one SEND_MESSAGE_V2 frame as clients write it (extFields of the
    header cases above), else another code, flag or header, damaged, cut or with more bytes."""
    if draw(st.integers(0, 3)):  # what clients send, some fields left out or odd
        small = st.integers(0, 2**31 - 1).map(str)
        fields = {"a": texts, "b": texts, "c": texts, "d": small, "e": small, "f": small,
                  "g": st.integers(0, 10**18 - 1).map(str), "h": small, "i": texts, "j": small,
                  "k": booleans, "l": small, "m": booleans, "n": texts}  # fmt: skip
        ext = {}
        for key, values in fields.items():
            kind = draw(st.integers(0, 40))
            if kind:
                ext[key] = draw(values if kind > 2 else numbers)
    else:
        ext, _ = draw(send_fields())
    code = 310 if draw(st.integers(0, 4)) else draw(st.sampled_from([10, 320, 311, 0, 3100]))
    cmd = RemotingCommand(
        code,
        opaque=draw(st.integers(-(2**31), 2**31 - 1)),
        flag=0 if draw(st.integers(0, 4)) else draw(st.integers(1, 3)),
        ext_fields=ext,
        body=draw(st.binary(max_size=8)),
    )
    if draw(st.integers(0, 6)) == 0:
        header = draw(json_headers())
        frame = bytearray(
            struct.pack(">iI", 4 + len(header) + len(cmd.body), len(header)) + header + cmd.body
        )
    else:
        frame = bytearray(encode(cmd))
    kind = draw(st.integers(0, 15))
    if kind == 1:  # a length that does not match the read
        frame[:4] = struct.pack(
            ">i", draw(st.sampled_from([-1, 0, 3, len(frame), len(frame) - 5, 2**31 - 1]))
        )
    elif kind == 2:  # a header length beyond the frame, below the prefix, or another serialize type
        frame[4:8] = struct.pack(">I", draw(st.sampled_from([0xFFFF, 5, 1 << 24 | 20, len(frame) - 8])))
    elif kind == 3 and len(frame) > 9:  # a damaged byte
        frame[draw(st.integers(8, len(frame) - 1))] = draw(st.integers(0, 255))
    elif kind == 4:  # cut, or followed by more
        frame = frame[: draw(st.integers(0, len(frame)))] if draw(st.booleans()) else frame + b"\0\0\0"
    max_body = draw(st.sampled_from([DEFAULT_MAX_FRAME_SIZE - 4, len(frame) - 4] * 3 + [len(frame) - 5, 16]))
    return bytes(frame), max_body, "g" in ext


def lone_outcome(fn: Callable[..., Any], data: Any, max_body: Any, born: bool) -> Any:
    got = outcome(fn, data, max_body)
    if got[0] == "value" and got[1] is not None and not born:
        cmd, header = got[1]
        got = ("value", (cmd, dataclasses.replace(header, born_timestamp=NOW_MS)))  # both "now"
    return typed(got)


@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lone_frames())
def test_lone_send_agrees(case: tuple[bytes, int, bool]) -> None:
    data, max_body, born = case
    compiled = lone_outcome(send_frame.lone_send, data, max_body, born)
    assert compiled == lone_outcome(send_frame.pure_lone_send, data, max_body, born)


def test_lone_send_is_compiled_and_takes_a_java_producers_send() -> None:
    assert send_frame.lone_send is speedups.COMPILED.lone_send  # type: ignore[union-attr]
    ext = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000"}
    ext |= {"h": "0", "i": "TAGS\x01A\x02UNIQ_KEY\x01AB\x02", "j": "0", "k": "false", "m": "false", "n": "b"}
    frame = encode(RemotingCommand(310, opaque=9, ext_fields=ext, body=b"body"))
    got = send_frame.lone_send(frame, DEFAULT_MAX_FRAME_SIZE - 4)
    assert got is not None
    cmd, header = got
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.body, cmd.ext_fields) == (310, 9, 0, b"body", ext)
    assert (header.topic, header.queue_id, header.properties) == ("T", 3, ext["i"])
    assert typed(got) == typed(send_frame.pure_lone_send(frame, DEFAULT_MAX_FRAME_SIZE - 4))
    for args in [(bytearray(frame), 1 << 20), (memoryview(frame), 1 << 20), (frame, 2**40), (frame, -1),
                 (frame, "x"), (frame,), ("text", 10)]:  # fmt: skip
        assert typed(outcome(send_frame.lone_send, *args)) == typed(outcome(send_frame.pure_lone_send, *args))


# -- broker_message ------------------------------------------------------------------------------
@settings(max_examples=examples(500), deadline=None)
@given(
    st.lists(
        st.one_of(st.text(max_size=4), st.binary(max_size=4), st.integers(-(2**70), 2**70), st.none()),
        min_size=0,
        max_size=11,
    )
)
def test_broker_message_agrees(args: list[Any]) -> None:
    compiled = outcome(send.new_broker_message, *args)
    assert typed(compiled) == typed(outcome(BrokerMessage, *args))


def test_broker_message_is_compiled_and_builds_a_sends_record() -> None:
    assert send.new_broker_message is speedups.COMPILED.broker_message  # type: ignore[union-attr]
    args = ("T", b"body", b"K\x01V\x02", 3, 0, 0, NOW_MS, b"\x7f\x00\x00\x01\x00\x00\x9c\x40", 0)
    msg = send.new_broker_message(*args)
    assert type(msg) is BrokerMessage and msg == BrokerMessage(*args)
    assert msg.prepared_transaction_offset == 0
