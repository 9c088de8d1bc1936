"""Where the CPU of ``bench/peers.py``'s rocketq ``batch32`` and ``consume`` cases goes, by thread.

    python bench/batch_consume.py --workload batch32                      # this tree
    python bench/batch_consume.py --workload consume --commit pull
    python bench/batch_consume.py --src /tmp/before/src --workload consume  # another tree
    python bench/batch_consume.py --workload batch32 --messages 100000 --spy /tmp/b  # and py-spy

Starts ``rocketq serve`` (ASYNC_FLUSH, no gRPC, data in a temporary directory) from ``--src`` and
runs one case with that tree's client in this process, as ``bench/peers.py`` does: ``batch32``
sends ``Producer.send_batch`` of 32 × 128 B, one batch in flight; ``consume`` preloads the
messages, then a ``LitePullConsumer`` assigned every queue polls 32 at a time and calls
``commit()`` after each poll (``--commit pull``: ``auto_commit``, each queue's position riding
on its next pull, one ``commit()`` at the end). Over the timed part only it prints the rate,
the client's and the server's CPU per message, each thread's CPU per message (utime + stime of
``/proc/<pid>/task/<tid>/stat``) and the server threads' context switches per 32 messages.

``--spy PREFIX`` also runs ``py-spy record`` (``--spy-args``, default 200 Hz, raw collapsed
stacks with thread names) on the server and on this process for the timed part, writes
``PREFIX-server.txt`` and ``PREFIX-client.txt`` and prints, for each busy thread, its samples
grouped by what they were doing (:data:`GROUPS`: the first group, from the innermost frame out,
whose pattern a frame contains), scaled to the thread's measured CPU. Samples asleep
(``EpollSelector.select``, ``Condition.wait``, ``Event.wait``) are left out of the scaling:
py-spy's idle detection misses many sleeping waits on this VM. The kernel's share of waking a
sleeping thread shows in no Python frame, so a thread that sleeps between batches (dispatch)
has its wake-ups spread over its Python groups; read those with the context switches.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from rocketq.free_ports import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
CLK_TCK = os.sysconf("SC_CLK_TCK")
BATCH = 32

#: (group, substrings of a frame), tried from the innermost frame outwards; the first frame that
#: contains one decides the sample's group.
GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("asleep (epoll, Event, Condition)", ("EpollSelector.select", "Condition.wait", "Event.wait")),
    ("blocking socket call (send + wait for the answer)", ("BlockingConnection.invoke",)),
    ("socket send (syscall)", ("_SelectorSocketTransport.write",)),
    ("socket recv", ("_read_ready__data_received", "_SelectorSocketTransport._read_ready")),
    ("waking another thread", ("ServiceThread.wakeup", "LoopWakeup", "Event.set", "Condition.notify")),
    (
        "facade hand-off to / from the loop thread",
        ("_write_to_self", "_read_from_self", "run_coroutine_threadsafe", "Future.result"),
    ),
    ("store put", ("MessageStore.put_messages", "MessageStore.put_message", "CommitLog.")),
    ("dispatch (ConsumeQueue, index)", ("ReputMessageService",)),
    ("batch body decode", ("decode_batch",)),
    (
        "properties",
        ("decode_properties", "encode_properties", "properties_as_sent", "batch_entry_properties"),
    ),
    ("message lookup (ConsumeQueue + CommitLog read)", ("StoreQueries", "ConsumeQueue", "MappedFile")),
    (
        "response encode",
        ("send_ok_ext_json", "success_frame", "msg_ids", "create_response", "encode_json_header", "encode ("),
    ),
    ("frame / header decode", ("FrameDecoder", "_parse_json", "decode_json_header", "decode_send_header")),
    ("offset commit", ("update_consumer_offset", "ConsumerOffsetManager")),
    ("pull body decode, MessageExt", ("decode_pull_body", "MessageExt")),
    ("Message objects (the harness)", ("<listcomp> (batch_consume",)),
    ("batch prepare (checks, ids)", ("_prepare_batch", "validate_", "UniqueIdGenerator", "encode_batch")),
    ("request handling", ("Broker._handle", "PullMessageProcessor", "SendMessageProcessor", "Connection.")),
    (
        "client request plumbing",
        ("ConsumerCore", "ConsumerQueues", "RemotingClient", "AsyncLitePull", "Producer"),
    ),
    ("asyncio machinery", ("asyncio/", "Handle._run")),
]

ASLEEP = GROUPS[0][0]


def thread_stats(pid: int) -> dict[str, tuple[float, int]]:
    """Per thread id: (utime + stime seconds, context switches)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/status", encoding="ascii") as f:
                status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
        except FileNotFoundError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        switches = int(status["voluntary_ctxt_switches"]) + int(status["nonvoluntary_ctxt_switches"])
        out[tid] = ((int(fields[11]) + int(fields[12])) / CLK_TCK, switches)
    return out


def group_samples(path: str) -> dict[str, collections.Counter[str]]:
    """py-spy raw output (``--threads``): samples per thread name and group."""
    by_thread: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack:
                continue
            frames = stack.split(";")
            thread = re.sub(r"^thread \(\w+\): ", "", frames[0])
            group = "other"
            for frame in reversed(frames[1:]):
                hit = next((name for name, subs in GROUPS if any(s in frame for s in subs)), None)
                if hit is not None:
                    group = hit
                    break
            by_thread[thread][group] += int(count)
    return by_thread


def print_groups(path: str, cpu_us: dict[str, float]) -> None:
    """The groups of each thread of ``path`` with a CPU figure, scaled to that figure."""
    for thread, groups in group_samples(path).items():
        us = cpu_us.get(thread)
        if us is None or us < 0.5:
            continue
        active = sum(groups.values()) - groups[ASLEEP]
        print(f"  {os.path.basename(path)} {thread}: {us:.1f} us/msg, {active} samples")
        for group, n in groups.most_common():
            if group != ASLEEP and active:
                print(f"    {us * n / active:5.1f} us/msg  {100 * n / active:4.0f} %  {group}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.path.join(HERE, "..", "src"), help="the tree's src directory")
    ap.add_argument("--workload", choices=("batch32", "consume"), required=True)
    ap.add_argument("--commit", choices=("poll", "pull"), default="poll", help="consume: how it commits")
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--spy", default="", help="py-spy output prefix (default: no profile)")
    ap.add_argument("--spy-args", default="-r 200 --format raw --threads")
    args = ap.parse_args()
    src = os.path.abspath(args.src)
    sys.path.insert(0, src)
    from rocketq.client import LitePullConsumer, Message, Producer, SendStatus  # noqa: PLC0415

    data_dir = tempfile.mkdtemp(prefix="batch-consume-")
    namesrv_port, broker_port = free_port(), free_port()
    log_path = os.path.join(data_dir, "serve.log")
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", data_dir),
                *("--flush", "ASYNC_FLUSH", "--grpc-port", "-1"),
                *("--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=src),
        )
    spies: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            with open(log_path, "rb") as f:
                if b"rocketq ready" in f.read():
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"rocketq serve did not start; see {log_path}")
            time.sleep(0.05)
        namesrv = f"127.0.0.1:{namesrv_port}"
        topic, body, n = f"BatchConsume{int(time.time())}", b"x" * 128, args.messages
        producer = Producer("BatchConsumePG", namesrv_addr=namesrv)
        producer.start()
        producer.send(Message(topic, body))  # route lookup and topic creation, untimed
        consumer = None
        if args.workload == "consume":
            for _ in range(0, n, BATCH):
                producer.send_batch([Message(topic, body) for _ in range(BATCH)])
            on_pull = args.commit == "pull"
            consumer = LitePullConsumer(
                "BatchConsumeCG", namesrv_addr=namesrv, auto_commit=on_pull, pull_batch_size=BATCH
            )
            consumer.start()
            queues = consumer.fetch_message_queues(topic)
            consumer.assign(queues)
            for mq in queues:
                consumer.seek_to_begin(mq)
            time.sleep(2)  # the preload's dispatch done before the timed part
        if args.spy:
            py_spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
            for who, pid in (("server", server.pid), ("client", os.getpid())):
                out = f"{args.spy}-{who}.txt"
                cmd = [py_spy, "record", "-p", str(pid), *args.spy_args.split(), "-o", out]
                spies.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(1.0)  # attached
        server_before, client_before = thread_stats(server.pid), thread_stats(os.getpid())
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        done = 0
        if consumer is None:
            for _ in range(0, n, BATCH):
                result = producer.send_batch([Message(topic, body) for _ in range(BATCH)])
                done += BATCH * (result.status is SendStatus.SEND_OK)
        else:
            while done < n:
                msgs = consumer.poll(timeout_ms=1000)
                if msgs and args.commit == "poll":
                    consumer.commit()
                done += len(msgs)
            if args.commit == "pull":
                consumer.commit()  # the positions the last pulls did not carry yet
        wall = time.perf_counter() - wall_before
        client_cpu = time.process_time() - cpu_before
        server_after, client_after = thread_stats(server.pid), thread_stats(os.getpid())
        names = {str(t.native_id): t.name for t in threading.enumerate()}  # before the shutdowns
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            spy.wait(60)
        if consumer is not None:
            consumer.shutdown()
        producer.shutdown()

        def per_msg(
            after: dict[str, tuple[float, int]], before: dict[str, tuple[float, int]]
        ) -> dict[str, float]:
            return {t: (v[0] - before.get(t, (0.0, 0))[0]) / done * 1e6 for t, v in after.items()}

        server_us = per_msg(server_after, server_before)
        client_us = per_msg(client_after, client_before)
        print(
            f"{args.workload}{' (commit on pull)' if args.commit == 'pull' else ''}: {done} messages, "
            f"{done / wall:,.0f} msgs/s, client {client_cpu / done * 1e6:.1f} us/msg, "
            f"server {sum(server_us.values()):.1f} us/msg, load average {os.getloadavg()[0]:.1f}"
        )
        busy = sorted(server_us, key=lambda t: -server_us[t])
        print(
            "  server threads, us/msg:",
            ", ".join(f"{t}: {server_us[t]:.1f}" for t in busy if server_us[t] >= 0.1),
        )
        print(
            "  server context switches per 32 messages:",
            ", ".join(
                f"{t}: {(server_after[t][1] - server_before.get(t, (0.0, 0))[1]) * BATCH / done:.1f}"
                for t in busy[:3]
            ),
        )
        print(
            "  client threads, us/msg:",
            ", ".join(f"{names.get(t, t)}: {v:.1f}" for t, v in client_us.items() if v >= 0.1),
        )
        if args.spy:
            for who, us in (("server", server_us), ("client", client_us)):
                path = f"{args.spy}-{who}.txt"
                spied = _thread_names(path)
                print_groups(path, {spied.get(t, names.get(t, t)): v for t, v in us.items()})
        return 0
    finally:
        for spy in spies:
            if spy.poll() is None:
                spy.kill()
        server.terminate()
        server.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)


def _thread_names(path: str) -> dict[str, str]:
    """Thread id → name, from the first frame of py-spy's raw lines (``thread (tid): name``)."""
    names = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"thread \((\w+)\): ([^;]+);", line)
            if m:
                names[m.group(1)] = m.group(2)
    return names


if __name__ == "__main__":
    sys.exit(main())
