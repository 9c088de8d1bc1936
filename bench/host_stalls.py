"""How often this machine stops running a process that asks for almost nothing.

    python bench/host_stalls.py              # 3 rounds of 10 s
    python bench/host_stalls.py --seconds 5 --rounds 1

One process sleeps 1 ms at a time and records how long each sleep really took. Nothing else of
this repository runs; on an idle machine every sleep should take a little over 1 ms. Sleeps that
take more than 5 ms are stalls: the process was ready to run and did not. Beside the stalls the
script prints the host's steal time over the round (``steal`` of /proc/stat: time the hypervisor
ran something else while this machine's vCPUs had work), as a share of all vCPUs' time.

Why it matters: a latency percentile over a few seconds is set by its few worst moments. At
5,000 messages/s one stall of 10 ms holds back 50 messages, a tenth of the 1 % tail of a 10 s
run; a few such stalls per run decide a p99 whatever the broker does (bench/broker.py's latency
case reports the steal of its own run and the p99 of the sends made while the host took nothing).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

SLEEP_S = 0.001
STALL_S = 0.005


def steal_ticks() -> int:
    """Time the hypervisor kept this machine's vCPUs from running (``steal`` of /proc/stat's
    ``cpu`` line), in clock ticks summed over all vCPUs; 0 where the kernel does not count it."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) if len(fields) > 8 else 0


def steal_pct(ticks: int, span_s: float) -> float:
    """``ticks`` of steal over ``span_s`` seconds as a share of all vCPUs' time, in %."""
    return 100 * ticks / (os.sysconf("SC_CLK_TCK") * span_s * (os.cpu_count() or 1))


def probe(seconds: float) -> dict[str, float]:
    """Sleep ``SLEEP_S`` at a time for ``seconds``; figures of how long the sleeps took."""
    gaps: list[float] = []
    steal0 = steal_ticks()
    start = prev = time.monotonic()
    end = start + seconds
    while prev < end:
        time.sleep(SLEEP_S)
        now = time.monotonic()
        gaps.append(now - prev)
        prev = now
    steal = steal_ticks() - steal0
    span = prev - start
    gaps.sort()
    stalls = [g for g in gaps if g > STALL_S]
    return {
        "sleeps": len(gaps),
        "p50_ms": gaps[len(gaps) // 2] * 1e3,
        "p99_ms": gaps[int(len(gaps) * 0.99)] * 1e3,
        "max_ms": gaps[-1] * 1e3,
        "stalls": len(stalls),
        "stalls_10ms": sum(1 for g in stalls if g > 0.010),
        "stalled_s": sum(stalls),
        "steal_pct": steal_pct(steal, span),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of a round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    limits = f"sleeps of {SLEEP_S * 1e3:g} ms, stall = over {STALL_S * 1e3:g} ms"
    print(f"# host stalls ({os.cpu_count()} vCPUs, {limits})")
    print()
    print("| round | sleeps | p50 | p99 | max | stalls (over 10 ms) | time stalled | host steal |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i in range(args.rounds):
        r = probe(args.seconds)
        print(
            f"| {i + 1} | {r['sleeps']:,.0f} | {r['p50_ms']:.2f} ms | {r['p99_ms']:.2f} ms "
            f"| {r['max_ms']:.1f} ms | {r['stalls']:.0f} ({r['stalls_10ms']:.0f}) "
            f"| {r['stalled_s'] * 1e3:.0f} ms | {r['steal_pct']:.1f} % |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
