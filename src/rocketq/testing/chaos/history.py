"""The operation history of a chaos run: what each client tried, and what came of it.

Every operation is recorded as Jepsen records it: an ``invoke`` line when a client starts it and
one completion line, ``ok``, ``fail`` (it certainly did not take effect) or ``info`` (it may or
may not have: indeterminate). Consumers' reads are completions without an invoke worth keeping
(``poll`` and ``drain`` are recorded as ``ok`` lines carrying what was read). One
:class:`Op` per line, a frozen value; :class:`Recorder` appends them, from any thread, to memory
and to a JSONL file; :func:`load_history` reads such a file back.

==========  ==================================================================================
``type``    meaning
==========  ==================================================================================
``send``    a producer's send of one payload (``payload``, ``key`` its sharding key). ``ok``
            carries the broker's ``queue``/``offset``/``msg_id`` and ``status``; ``fail`` and
            ``info`` the ``error``. ``attempt`` counts the workload's own resends of the payload;
            ``client_retries`` is how many retries the client SDK was allowed to make inside
            the call (attempts the history cannot see)
``poll``    a consumer got messages of one ``queue`` (``reads``: offset, payload, msg id each)
``ack``     a consumer acknowledged its reads (push listener success, lite-pull commit):
            ``queue`` and ``offset``, the next offset to consume
``assign``  a consumer's queue assignment changed (``queues``): its positions may jump
``drain``   the final read of one ``queue`` from offset 0, from ``node`` (``leader`` through the
            broker, or a replica's self id when read from its store files)
==========  ==================================================================================

Definite and indeterminate send failures (:func:`classify_send_error`). *Definite*: refused
before anything was appended — the broker answered SERVICE_NOT_AVAILABLE (14: a follower, a
store not accepting writes; ``rocketq.store.dledger_commitlog.raise_for``), SYSTEM_BUSY (2:
too many appends pending), NO_PERMISSION (16), TOPIC_NOT_EXIST (17), MESSAGE_ILLEGAL (13),
INVALID_PARAMETER (29); no connection could be made; no route; the message failed local checks.
*Indeterminate*: a timeout, a connection lost with the request written, SYSTEM_ERROR (1: the
broker's ``ReplicationError`` after a quorum timeout or a term change, RocketMQ's
IN_SYNC_REPLICAS_NOT_ENOUGH), any other code, and any failure after which the SDK may have made
attempts of its own (more than one attempt listed in the error's note, or none listed). Send
statuses: SEND_OK is ``ok``; FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are
``info`` (stored on the leader, the durability asked for not confirmed).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from rocketq.errors import (
    ClientStateError,
    ConfigError,
    InvalidParameter,
    MessageIllegal,
    NameServerUnavailable,
    NoPermission,
    RemotingConnectError,
    ServiceNotAvailable,
    SystemBusy,
    TopicNotExist,
)

OpType = Literal["send", "poll", "ack", "assign", "drain"]
Phase = Literal["invoke", "ok", "fail", "info"]
OP_TYPES: tuple[str, ...] = ("send", "poll", "ack", "assign", "drain")
PHASES: tuple[str, ...] = ("invoke", "ok", "fail", "info")

#: Errors raised before a request reached a broker, or answered by a broker before it appended.
DEFINITE_ERRORS: tuple[type[BaseException], ...] = (
    ServiceNotAvailable,
    SystemBusy,
    NoPermission,
    TopicNotExist,
    MessageIllegal,
    InvalidParameter,
    RemotingConnectError,
    NameServerUnavailable,
    ClientStateError,
    ConfigError,
)
#: Send statuses that mean stored but not confirmed as asked: indeterminate.
INDETERMINATE_STATUSES = frozenset({"FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"})
_FAILED_TIMES = re.compile(r"failed (\d+) time\(s\)")


@dataclass(frozen=True, slots=True)
class Read:
    """One message a poll or drain returned: its queue offset, payload and message id."""

    offset: int
    payload: str
    msg_id: str = ""


@dataclass(frozen=True, slots=True)
class Op:
    """One line of the history (see the module docstring for the fields by type)."""

    process: str
    type: OpType
    phase: Phase
    wall_ms: int = 0
    mono_ns: int = 0
    topic: str = ""
    queue: int = -1
    offset: int = -1
    msg_id: str = ""
    payload: str = ""
    key: str | None = None
    status: str = ""
    error: str = ""
    definite: bool | None = None
    attempt: int = 0
    client_retries: int = 0
    node: str = ""
    reads: tuple[Read, ...] = ()
    queues: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in OP_TYPES:
            raise ValueError(f"op type {self.type!r} is not one of {', '.join(OP_TYPES)}")
        if self.phase not in PHASES:
            raise ValueError(f"op phase {self.phase!r} is not one of {', '.join(PHASES)}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            if f.name == "reads":
                value = [[r.offset, r.payload, r.msg_id] for r in value]
            elif f.name == "queues":
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Op:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(obj) - names
        if unknown:
            raise ValueError(f"unknown op fields {sorted(unknown)}")
        kwargs = dict(obj)
        if "reads" in kwargs:
            kwargs["reads"] = tuple(Read(int(o), str(p), str(m)) for o, p, m in kwargs["reads"])
        if "queues" in kwargs:
            kwargs["queues"] = tuple(int(q) for q in kwargs["queues"])
        return cls(**kwargs)


def now_fields() -> dict[str, int]:
    """``wall_ms`` and ``mono_ns`` of this moment."""
    return {"wall_ms": time.time_ns() // 1_000_000, "mono_ns": time.monotonic_ns()}


def classify_send_error(exc: BaseException, client_retries: int = 0) -> tuple[Phase, str]:
    """``("fail", why)`` when the send certainly did not append, else ``("info", why)``; see
    the module docstring. ``client_retries``: the retries the SDK was allowed in the call."""
    why = f"{type(exc).__name__}: {exc}"
    if client_retries > 0 and not isinstance(exc, ClientStateError | ConfigError):
        notes = " ".join(getattr(exc, "__notes__", ()))
        m = _FAILED_TIMES.search(notes)
        if m is None or int(m.group(1)) != 1:
            return "info", why  # the SDK may have made attempts the history cannot see
    if isinstance(exc, DEFINITE_ERRORS):
        return "fail", why
    return "info", why


def classify_send_status(status: str) -> Phase:
    """``ok`` for SEND_OK, ``info`` for a status that leaves durability unconfirmed."""
    if status in INDETERMINATE_STATUSES:
        return "info"
    if status == "SEND_OK":
        return "ok"
    raise ValueError(f"unknown send status {status!r}")


class Recorder:
    """Thread-safe: appends ops to memory and, when ``path`` is given, to a JSONL file (one
    ``write`` per op, so a killed run keeps what it recorded)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._file: TextIO | None = open(path, "a", encoding="utf-8", buffering=1) if path else None  # noqa: SIM115

    def record(self, op: Op) -> Op:
        line = json.dumps(op.to_json(), separators=(",", ":")) + "\n" if self._file is not None else ""
        with self._lock:
            self._ops.append(op)
            if self._file is not None:
                self._file.write(line)
        return op

    def invoke(self, process: str, type: OpType, **fields: Any) -> Op:
        """Record and return the invoke line of an operation (time fields filled in)."""
        return self.record(Op(process, type, "invoke", **{**now_fields(), **fields}))

    def complete(self, invoked: Op, phase: Phase, **changes: Any) -> Op:
        """Record the completion of ``invoked``: its fields, ``phase``, ``changes`` and now."""
        if phase == "invoke":
            raise ValueError("a completion's phase is ok, fail or info")
        definite: bool | None = {"fail": True, "info": False}.get(phase)
        base: dict[str, Any] = {"phase": phase, "definite": definite, **now_fields()}
        return self.record(dataclasses.replace(invoked, **{**base, **changes}))

    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_history(path: str) -> list[Op]:
    """The ops of a JSONL history file; a torn last line (a killed recorder) is skipped."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out: list[Op] = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            out.append(Op.from_json(json.loads(raw)))
        except json.JSONDecodeError:
            if n == len(lines):
                break
            raise ValueError(f"{path}:{n}: not a JSON op line: {raw[:80]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: {exc}") from None
    return out


def write_history(path: str, ops: Iterable[Op]) -> None:
    """Write ``ops`` as a JSONL history file (replacing it)."""
    with open(path, "w", encoding="utf-8") as f:
        for op in ops:
            f.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")
