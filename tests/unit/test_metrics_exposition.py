"""The text exposition writer (rocketq.metrics.exposition), the metrics settings, and the
message-type label of a send."""

from __future__ import annotations

import bisect
import random
import re
import threading

import pytest

from _support.metrics import PROMTOOL, check_exposition, promtool_problems, value
from rocketq.broker.config import BrokerConfig, broker_config_from_properties
from rocketq.broker.metrics import MESSAGE_SIZE_BOUNDS, BrokerMetrics, message_type
from rocketq.errors import ConfigError, ResponseCode, SystemBusy
from rocketq.metrics.exposition import COUNTER, GAUGE, HISTOGRAM, Family, Histogram, ThreadHistograms, render
from rocketq.namesrv.config import NamesrvConfig
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.rpc_metrics import RPC_LATENCY_MS_BOUNDS, RpcLatency


def test_render_writes_counters_gauges_and_cumulative_histograms() -> None:
    hist = Histogram((1, 5))
    for x in (0.5, 1, 2, 7, 9):
        hist.observe(x)
    text = render(
        [
            Family("demo_requests_total", COUNTER, "Requests.").add({"code": "a"}, 3),
            Family("demo_depth", GAUGE, "Depth.").add((), 2.5),
            Family("demo_latency", HISTOGRAM, "Latency.").add({"code": "a"}, hist),
        ]
    )
    assert text == (
        "# HELP demo_requests_total Requests.\n"
        "# TYPE demo_requests_total counter\n"
        'demo_requests_total{code="a"} 3\n'
        "# HELP demo_depth Depth.\n"
        "# TYPE demo_depth gauge\n"
        "demo_depth 2.5\n"
        "# HELP demo_latency Latency.\n"
        "# TYPE demo_latency histogram\n"
        'demo_latency_bucket{code="a",le="1.0"} 2\n'
        'demo_latency_bucket{code="a",le="5.0"} 3\n'
        'demo_latency_bucket{code="a",le="+Inf"} 5\n'
        'demo_latency_sum{code="a"} 19.5\n'
        'demo_latency_count{code="a"} 5\n'
    )
    samples = check_exposition(text)
    assert value(samples, "demo_latency_count", code="a") == 5


def test_label_values_and_help_are_escaped() -> None:
    nasty = 'a"b\\c\nd'
    text = render([Family("demo_x", GAUGE, "Help with \\ and\nnewline.").add({"topic": nasty}, 1)])
    assert 'demo_x{topic="a\\"b\\\\c\\nd"} 1' in text
    assert "# HELP demo_x Help with \\\\ and\\nnewline.\n" in text
    samples = check_exposition(text)
    assert value(samples, "demo_x", topic=nasty) == 1


def test_families_of_one_name_are_merged_and_types_must_agree() -> None:
    a = Family("demo_up", GAUGE, "Up.").add({"node": "a"}, 1)
    b = Family("demo_up", GAUGE, "Other help.").add({"node": "b"}, 1)
    text = render([a, b])
    assert text.count("# TYPE demo_up gauge") == 1
    assert 'demo_up{node="a"} 1\ndemo_up{node="b"} 1\n' in text
    check_exposition(text)
    with pytest.raises(ValueError, match="demo_up is both a gauge and a counter"):
        render([a, Family("demo_up", COUNTER, "Up.")])


def test_family_and_histogram_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="ascend"):
        Histogram((5, 1))
    with pytest.raises(ValueError, match="ascend"):
        Histogram((1, 1))
    with pytest.raises(ValueError, match="metric type"):
        Family("x", "summary", "")
    with pytest.raises(TypeError, match="is a histogram"):
        Family("x", HISTOGRAM, "").add((), 1)
    with pytest.raises(TypeError, match="is a gauge"):
        Family("x", GAUGE, "").add((), Histogram((1,)))


def test_thread_histograms_lose_no_observation() -> None:
    hists = ThreadHistograms((10,))

    def observe() -> None:
        local = hists.local()
        for _ in range(20_000):
            local.observe(1)

    threads = [threading.Thread(target=observe) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    merged = hists.merged()
    assert merged.count == 80_000
    assert merged.counts == [80_000, 0]


def test_message_type_follows_rocketmq() -> None:
    assert message_type({}, half=True) == "transaction"
    assert message_type({"__SHARDINGKEY": "k", "DELAY": "3"}, half=False) == "fifo"
    assert message_type({"DELAY": "3"}, half=False) == "delay"
    assert message_type({"TIMER_DELIVER_MS": "1"}, half=False) == "delay"
    assert message_type({"__STARTDELIVERTIME": "1"}, half=False) == "delay"
    assert message_type({"TAGS": "a"}, half=False) == "normal"


def test_broker_counters_render_with_rocketmq_labels() -> None:
    metrics = BrokerMetrics(BrokerConfig(broker_name="b1", broker_cluster_name="c1"))
    metrics.stored("T", "normal", 300)
    metrics.stored("T", "normal", 5000 * 2, count=2)  # a batch: 5000 B per message
    metrics.pulled("T", "G", 3, 10300, queue_id=0, next_offset=3)
    metrics.sent_to_dlq("T", "G")
    samples = check_exposition(render(metrics._counter_families()))
    base = {"cluster": "c1", "node_type": "broker", "node_id": "b1"}
    labels = {**base, "topic": "T", "message_type": "normal", "is_system": "false"}
    assert value(samples, "rocketmq_messages_in_total", **labels) == 3
    assert value(samples, "rocketmq_throughput_in_total", **labels) == 10300
    assert value(samples, "rocketmq_message_size_bucket", le="1024.0", **labels) == 1
    assert value(samples, "rocketmq_message_size_bucket", le="4096.0", **labels) == 1
    assert value(samples, "rocketmq_message_size_bucket", le="524288.0", **labels) == 3
    assert value(samples, "rocketmq_message_size_count", **labels) == 3
    out = {**base, "topic": "T", "consumer_group": "G", "is_retry": "false", "is_system": "false"}
    assert value(samples, "rocketmq_messages_out_total", **out) == 3
    assert value(samples, "rocketmq_throughput_out_total", **out) == 10300
    assert value(samples, "rocketmq_send_to_dlq_messages_total", **out) == 1


def test_metrics_settings_use_rocketmq_keys_and_refuse_what_rocketq_does_not_serve() -> None:
    assert not BrokerConfig().metrics_enabled
    cfg = broker_config_from_properties(
        {"metricsExporterType": "PROM", "metricsPromExporterPort": "0", "metricsPromExporterHost": "::1"}
    )
    assert cfg.metrics_enabled
    assert (cfg.metrics_prom_exporter_port, cfg.metrics_host) == (0, "::1")
    assert BrokerConfig(metrics_exporter_type="prom", broker_ip1="10.1.2.3").metrics_host == "10.1.2.3"
    with pytest.raises(ConfigError, match=r"OTLP_GRPC.*not supported.*PROM"):
        BrokerConfig(metrics_exporter_type="OTLP_GRPC")
    with pytest.raises(ConfigError, match=re.escape("'JMX' is not one of DISABLE, OTLP_GRPC, PROM, LOG")):
        BrokerConfig(metrics_exporter_type="JMX")
    with pytest.raises(ConfigError, match=re.escape("metrics_prom_exporter_port=70000 is outside 0..65535")):
        NamesrvConfig(metrics_exporter_type="PROM", metrics_prom_exporter_port=70000)
    ns = NamesrvConfig.from_rocketmq_properties(
        {"metricsExporterType": "PROM", "metricsPromExporterPort": "9"}
    )
    assert ns.metrics_enabled and ns.metrics_prom_exporter_port == 9


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_is_strict_enough_to_catch_a_broken_exposition() -> None:
    broken = "# TYPE demo_x counter\ndemo_x 1\n# TYPE demo_x counter\ndemo_x 2\n"
    assert promtool_problems(broken) is not None


def test_rpc_latency_counts_every_request_in_its_bucket_and_the_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    """The immediate wrapper's fast path (first bucket, held in its closure), a slower SUCCESS,
    an answer that is a command, an error, and a typed send batch: exact buckets, counts and
    sums in milliseconds."""
    ticks = iter([0, 400_000, 0, 1_000_000, 0, 2_500_000, 0, 7_000, 0, 50_000])
    monkeypatch.setattr("time.perf_counter_ns", lambda: next(ticks))
    answers: list[object] = [b"ok", b"ok", b"ok", RemotingCommand(code=ResponseCode.SUCCESS), "boom"]

    def send_now(conn: object, request: object) -> object:
        answer = answers.pop(0)
        if answer == "boom":
            raise SystemBusy("busy")
        return answer

    rpc = RpcLatency()
    immediate: dict[int, object] = {int(RequestCode.SEND_MESSAGE_V2): send_now}
    rpc.instrument({}, immediate)  # type: ignore[arg-type]
    timed = immediate[int(RequestCode.SEND_MESSAGE_V2)]
    assert getattr(timed, "__wrapped__", None) is send_now
    for _ in range(4):
        timed(None, None)  # type: ignore[operator]
    with pytest.raises(SystemBusy):
        timed(None, None)  # type: ignore[operator]
    rpc.record(int(RequestCode.PULL_MESSAGE), int(ResponseCode.PULL_NOT_FOUND), 4_000_000_000)
    samples = check_exposition(render([rpc.family((("node_type", "broker"),))]))
    ok = {"request_code": "send_message_v2", "response_code": "success"}
    # 0.4 ms, exactly 1 ms (le is inclusive), 0.007 ms (a command): the first bucket; 2.5 ms
    assert value(samples, "rocketmq_rpc_latency_bucket", le="1.0", **ok) == 3
    assert value(samples, "rocketmq_rpc_latency_bucket", le="3.0", **ok) == 4
    assert value(samples, "rocketmq_rpc_latency_count", **ok) == 4
    assert value(samples, "rocketmq_rpc_latency_sum", **ok) == pytest.approx(0.4 + 1.0 + 2.5 + 0.007)
    busy = {"request_code": "send_message_v2", "response_code": "system_busy"}
    assert value(samples, "rocketmq_rpc_latency_bucket", le="1.0", **busy) == 1
    assert value(samples, "rocketmq_rpc_latency_sum", **busy) == pytest.approx(0.05)
    held = {"request_code": "pull_message", "response_code": "pull_not_found"}
    assert value(samples, "rocketmq_rpc_latency_bucket", le="3000.0", **held) == 0
    assert value(samples, "rocketmq_rpc_latency_count", **held) == 1


def test_fold_adds_a_batch_up_as_record_by_record() -> None:
    """Sends of one topic and type (added up as a batch) and mixed ones (record by record) end
    in the counts that adding each record to its own bucket gives; sizes on the bounds too."""
    rng = random.Random(7)
    sizes = [1, 1024, 1025, 4096, 4097, 512 * 1024, 4 * 1024 * 1024, 4 * 1024 * 1024 + 1]
    one_kind = [("T", "normal", rng.choice(sizes), 1) for _ in range(300)]
    mixed = [
        (rng.choice("AB"), rng.choice(["normal", "fifo"]), rng.randint(1, 5_000_000), rng.randint(1, 3))
        for _ in range(300)
    ]
    for records in (one_kind, mixed, one_kind[:1], [("T", "normal", 300, 1)] * 5):
        metrics = BrokerMetrics(BrokerConfig())
        for topic, kind, size, count in records:
            metrics.stored(topic, kind, size, count)
        metrics.fold()
        expected: dict[tuple[str, str], list[int]] = {}
        for topic, kind, size, count in records:
            c = expected.setdefault((topic, kind), [0] * (len(MESSAGE_SIZE_BOUNDS) + 3))
            c[0] += count
            c[1] += size
            c[2 + bisect.bisect_left(MESSAGE_SIZE_BOUNDS, size // count)] += count
        assert metrics.messages_in == expected


def test_rpc_latency_fold_puts_values_on_a_bound_in_that_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    elapsed_ms = [0.001, 1, 1.000001, 3, 5, 9.9, 10, 100, 1000, 3000, 3000.000001, 60_000]
    ticks = iter([t for ms in elapsed_ms for t in (0, round(ms * 1_000_000))])
    monkeypatch.setattr("time.perf_counter_ns", lambda: next(ticks))
    rpc = RpcLatency()
    immediate: dict[int, object] = {int(RequestCode.SEND_MESSAGE_V2): lambda conn, request: b"ok"}
    rpc.instrument({}, immediate)  # type: ignore[arg-type]
    for _ in elapsed_ms:
        immediate[int(RequestCode.SEND_MESSAGE_V2)](None, None)  # type: ignore[operator]
    hist = dict(rpc.family(()).samples)[
        (("protocol_type", "remoting"), ("request_code", "send_message_v2"), ("response_code", "success"))
    ]
    assert isinstance(hist, Histogram)
    expected = [0] * (len(RPC_LATENCY_MS_BOUNDS) + 1)
    for ms in elapsed_ms:
        expected[bisect.bisect_left(RPC_LATENCY_MS_BOUNDS, ms)] += 1
    assert hist.counts == expected == [2, 2, 1, 2, 1, 1, 1, 2]
    assert hist.sum == pytest.approx(sum(elapsed_ms))


def test_rpc_latency_fold_adds_pending_successes_to_their_request_code() -> None:
    """SUCCESS latencies pending per request code (as the broker's dispatch appends them: a code
    seen first gets its list) end in the histogram of their own code, each with its exact
    count and sum; the lists are emptied in place (the dispatch keeps appending to them)."""
    rpc = RpcLatency()
    sends = [(int(RequestCode.SEND_MESSAGE_V2), ns) for ns in (400_000, 1_000_000, 2_500_000)]
    batches = [(int(RequestCode.SEND_BATCH_MESSAGE), ns) for ns in (7_000, 4_000_000)]
    for code, ns in sends + batches:
        rpc.ok[code].append(ns)
    held = rpc.ok[int(RequestCode.SEND_MESSAGE_V2)]
    rpc.fold()
    assert rpc.ok[int(RequestCode.SEND_MESSAGE_V2)] is held and not held
    for code, entries in ((RequestCode.SEND_MESSAGE_V2, sends), (RequestCode.SEND_BATCH_MESSAGE, batches)):
        hist = rpc.table[(int(code), int(ResponseCode.SUCCESS))]
        expected = [0] * (len(RPC_LATENCY_MS_BOUNDS) + 1)
        for _, ns in entries:
            expected[bisect.bisect_left(RPC_LATENCY_MS_BOUNDS, ns / 1e6)] += 1
        assert hist.counts == expected
        assert hist.sum == pytest.approx(sum(ns for _, ns in entries) / 1e6)
