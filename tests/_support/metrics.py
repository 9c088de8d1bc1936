"""Reading ``/metrics`` in tests: scrape, check the format strictly, look samples up.

:func:`check_exposition` parses the text with ``prometheus_client``'s parser (a test dependency)
and, where ``promtool`` is installed (Debian package ``prometheus``), runs ``promtool check
metrics`` on it too, which also lints names, types and histogram shapes.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

PROMTOOL = shutil.which("promtool")


def scrape(url: str, timeout_s: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        assert response.status == 200
        content_type = response.headers["Content-Type"]
        assert content_type == "text/plain; version=0.0.4; charset=utf-8", content_type
        text: str = response.read().decode("utf-8")
        return text


def promtool_problems(text: str) -> str | None:
    """``promtool check metrics``'s complaints about ``text`` (None: accepted, or no promtool)."""
    if PROMTOOL is None:
        return None
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0 or done.stdout.strip() or done.stderr.strip():
        return f"exit {done.returncode}: {done.stdout}{done.stderr}"
    return None


def check_exposition(text: str) -> Samples:
    """Every sample of ``text`` by (name, labels), after checking the format: each family's
    samples together after one TYPE line, histograms cumulative and ending in +Inf = _count."""
    problems = promtool_problems(text)
    assert problems is None, f"promtool check metrics rejects the exposition: {problems}\n{text}"
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"second TYPE line for {name}"
            types[name] = kind
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        assert types.get(family.name) == family.type or family.type == "counter", (family.name, family.type)
        buckets: dict[frozenset[tuple[str, str]], list[tuple[float, float]]] = {}
        counts: dict[frozenset[tuple[str, str]], float] = {}
        for s in family.samples:
            labels = frozenset(s.labels.items())
            key = (s.name, labels)
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = s.value
            if s.name.endswith("_bucket"):
                rest = frozenset((k, v) for k, v in s.labels.items() if k != "le")
                buckets.setdefault(rest, []).append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_count") and family.type == "histogram":
                counts[labels] = s.value
        for labels, series in buckets.items():
            bounds = [b for b, _ in series]
            values = [v for _, v in series]
            assert bounds == sorted(bounds) and bounds[-1] == float("inf"), (family.name, bounds)
            assert values == sorted(values), f"{family.name} buckets not cumulative: {values}"
            assert values[-1] == counts[labels], (family.name, values[-1], counts[labels])
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels`` (0 when none)."""
    want = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and want <= have)


def has(samples: Samples, name: str, **labels: str) -> bool:
    want = set(labels.items())
    return any(n == name and want <= have for (n, have) in samples)


__all__ = ["PROMTOOL", "check_exposition", "has", "promtool_problems", "scrape", "value"]
