"""Which implementation of the hot codec functions is in use: compiled or pure Python.

``pip install`` builds the C module :mod:`rocketq._speedups` when the machine has a C compiler
and the Python headers (``setup.py``); without them the install still succeeds and rocketq runs
on its pure-Python modules, which stay the reference: every compiled function has the exact
semantics of its pure counterpart, and the tests run both.

Accelerated now (a function is only compiled when it pays on a public path; see
docs/benchmarks.md): :func:`rocketq.protocol.record.decode_record` and
:func:`rocketq.protocol.record.view_to_message`, the record decoding of pull and pop answers
(the consumer's ``decode_pull_body``) and of the store's message lookups; and the counting on
a broker's send path while metrics are on (``RpcTimer``, the request timing of the broker's
dispatch, :class:`rocketq.remoting.rpc_metrics.RpcLatency`; ``SendCounter``, the messages per
topic and type, :class:`rocketq.broker.metrics.BrokerMetrics`), whose pure counterparts stay in
those classes; and the store's dispatch of CommitLog records (``scan_window``: the window
parse of :func:`rocketq.store.record_scan.parse_window`; ``index_put_keys``: the entry loop of
:meth:`rocketq.store.index_file.IndexFile.put_keys`; ``cq_pack_run``: the run loop of
:meth:`rocketq.store.consume_queue.ConsumeQueue.put_units`; for a small window's request objects
``cq_group_requests``, ``cq_put_run``, ``index_entries_of`` and ``index_put_file``: the
ConsumeQueue dispatcher's grouping and each queue's first run, the index dispatcher's entry
picking and ``put_keys`` whole), selected in those modules;
``scan_window`` with an entry index also scans a DLedger member's committed entries, headers and
records (:func:`rocketq.store.dledger_window.parse_entry_run`, whose reference is
``parse_entry_run_pure``); and the
broker's batch sends (``batch_plan``, ``batch_write``: the usual SEND_BATCH_MESSAGE of a RocketMQ
client packed into the CommitLog from its body, :mod:`rocketq.store.packed_batch`, whose
reference is the general path of building the messages and packing each); the embedded
store's conversion of ``Message`` objects nothing parks (``message_inner``: the BrokerMessage of
:meth:`rocketq.store.message_store.MessageStore.put_message`; ``plan_messages``: a batch of one
topic laid out for ``batch_write``), whose reference is the pure conversion in that module; and
the DLedger leader's encoding of a proposed batch of entries (``encode_entries``: headers, both
CRCs and index records of a run, :func:`rocketq.ha.entry_format.encode_entries_pure`) and of
each entry's record (``dledger_record``: a V1 record with an IPv4 born host for its entry's
position, :func:`rocketq.store.dledger_commitlog.pure_dledger_record`, the layout's pack); and
a store put's pre-check for the names that park a message (``may_be_timed``: a timer's or a
delay level's, :func:`rocketq.store.store_puts.pure_may_be_timed`).

A DLedger follower's side of an append is compiled as well: ``split_raw_entries``, the entries of
a received append (:func:`rocketq.ha.peer_codec.split_raw_pure`, which takes anything malformed),
and ``check_entries``, the check of the leader's bytes before they are written
(:func:`rocketq.ha.entry_format.check_entries_pure`).

``ROCKETQ_PURE=1`` in the environment at import time forces the pure path. :data:`ACTIVE` says
which one is in use (``rocketq --version`` prints it) and :data:`REASON` why, when pure.

The codecs of a broker's single send are compiled too, each with a ``pure_`` twin in its module
that it hands the uncommon cases to: ``parse_frames`` (the frame loop of
:meth:`rocketq.remoting.codec.FrameDecoder.feed` over JSON frames, the pure loop taking any
other), :func:`rocketq.remoting.command.decode_json_header` (a request's JSON header to its
command; the client's answers too), :func:`rocketq.protocol.headers.decode_send_header` (the
SEND_MESSAGE(_V2) header's fields to checked values),
:func:`rocketq.broker.send_properties.sent_properties` (the request's properties to the
record's: decoded, UNIQ_KEY and CLUSTER added, encoded), :func:`rocketq.broker.send.send_ok_frame`
(the SUCCESS answer frame) and ``put_record`` (the record write of
:meth:`rocketq.store.commitlog.CommitLog.put_message`, whose struct layout stays the reference);
``put_lane`` (a ``PutLane`` per plain CommitLog: that ``put_message``'s whole fast path, and
:meth:`rocketq.store.message_store.MessageStore.put_message`'s usual path with it, in one call,
handing every other put to the Python path, the reference; see :mod:`rocketq.store.commitlog`);
and ``lone_send`` (:func:`rocketq.broker.send_frame.pure_lone_send`: a read that is one whole
SEND_MESSAGE_V2 frame to its command and checked header in one call, for the broker's lone
handler, :meth:`rocketq.broker.send.SendMessageProcessor.send_lone`) and ``broker_message``
(:data:`rocketq.broker.send.new_broker_message`: a single send's ``BrokerMessage`` built without
its generated ``__init__``).

The blocking producer's usual answer is read compiled: ``send_result``
(:func:`rocketq.client.send_answer.send_result`: a read that is exactly the SUCCESS answer to the
send made into its SendResult), whose reference is the general decoding
(:func:`rocketq.client.send_answer.pure_send_result`); anything else it leaves to that. Its
usual request is made compiled too: ``plain_send_frame``
(:func:`rocketq.client.send_plain.pure_plain_send_frame`: a plain message's UNIQ_KEY, opaque
and SEND_MESSAGE_V2 frame in one call) with ``seq_take``
(:func:`rocketq.message.pure_seq_take`, the id generator's counter step, atomic with the GIL).

A client's requests are written compiled too, with the same pattern:
:func:`rocketq.remoting.command.encode_json_header` (a command's JSON header) and ``encode_frame``
(:func:`rocketq.remoting.codec.encode`, the whole frame of a JSON command), each handing a command
with unusual field types to its ``pure_`` twin.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Final

#: The environment variable that forces the pure-Python path ("1", "true" or "yes").
PURE_ENV: Final = "ROCKETQ_PURE"


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes"):
        return None, f"{PURE_ENV} is set"
    try:
        module = importlib.import_module("rocketq._speedups")
    except ImportError as exc:
        return None, f"the compiled module is not built ({exc}); pip install with a C compiler builds it"
    return module, ""


_LOADED = _load()
#: The compiled module, or None on the pure path.
COMPILED: Final[ModuleType | None] = _LOADED[0]
#: Why the pure path is in use ("" when compiled).
REASON: Final[str] = _LOADED[1]
#: "compiled" or "pure".
ACTIVE: Final = "compiled" if COMPILED is not None else "pure"


def module_for(compiled: bool | None = None) -> ModuleType | None:
    """The compiled module to use, or None for the pure path: ``compiled`` None takes what is in
    use (:data:`COMPILED`), False the pure path, True the compiled one (a ValueError, saying why,
    when it is not in use; for tests that compare the two)."""
    if compiled is False:
        return None
    if compiled and COMPILED is None:
        raise ValueError(f"the compiled module is not in use: {REASON}")
    return COMPILED


def describe() -> str:
    """One line for logs and ``--version``: which codec implementation runs, and why."""
    return (
        "codecs: compiled (rocketq._speedups)" if COMPILED is not None else f"codecs: pure Python ({REASON})"
    )
