"""The optional C accelerator: built by the install of this environment, chosen at import, and
switched off by ROCKETQ_PURE=1."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

from _support.codecs import cannot_build
from rocketq import speedups
from rocketq.protocol import record


def test_the_install_built_the_compiled_module() -> None:
    """Fails when `pip install` silently fell back to pure Python on a machine that can build."""
    if cannot_build():
        pytest.skip(cannot_build())
    if os.environ.get(speedups.PURE_ENV):
        pytest.skip(f"{speedups.PURE_ENV} is set for this run")
    assert speedups.ACTIVE == "compiled", speedups.REASON
    assert record.decode_record is speedups.COMPILED.decode_record  # type: ignore[union-attr]
    assert record.view_to_message is speedups.COMPILED.view_to_message  # type: ignore[union-attr]


PROBE = """
from rocketq import speedups
from rocketq.client import pull_decode
from rocketq.protocol import record
print(speedups.ACTIVE, record.decode_record is record.pure_decode_record,
      pull_decode.view_to_message is record.pure_view_to_message)
"""


def run_probe(pure: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != speedups.PURE_ENV}
    if pure is not None:
        env[speedups.PURE_ENV] = pure
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True, env=env
    )
    return done.stdout.strip()


def test_rocketq_pure_forces_the_pure_path() -> None:
    assert run_probe("1") == "pure True True"


def test_without_rocketq_pure_the_compiled_path_is_used_when_built() -> None:
    built = importlib.util.find_spec("rocketq._speedups") is not None
    expected = "compiled False False" if built else "pure True True"
    assert run_probe(None) == expected
    assert run_probe("0") == expected


def test_version_says_which_codecs_run() -> None:
    env = {**os.environ, speedups.PURE_ENV: "1"}
    done = subprocess.run(
        [sys.executable, "-m", "rocketq.cli", "--version"],
        capture_output=True, text=True, timeout=60, check=True, env=env,
    )  # fmt: skip
    assert done.stdout.strip() == f"rocketq 0.1.0 (codecs: pure Python ({speedups.PURE_ENV} is set))"


SEND_PROBE = """
from rocketq.broker import send, send_properties
from rocketq.protocol import headers
print(headers.decode_send_header is headers.pure_decode_send_header,
      send_properties.sent_properties is send_properties.pure_sent_properties,
      send.send_ok_frame is send.pure_send_ok_frame)
"""


def test_the_send_path_codecs_follow_the_choice() -> None:
    env = {k: v for k, v in os.environ.items() if k != speedups.PURE_ENV}
    pure = subprocess.run(
        [sys.executable, "-c", SEND_PROBE], capture_output=True, text=True, timeout=60, check=True,
        env={**env, speedups.PURE_ENV: "1"},
    )  # fmt: skip
    assert pure.stdout.strip() == "True True True"
    built = importlib.util.find_spec("rocketq._speedups") is not None
    chosen = subprocess.run(
        [sys.executable, "-c", SEND_PROBE], capture_output=True, text=True, timeout=60, check=True, env=env
    )
    assert chosen.stdout.strip() == ("False False False" if built else "True True True")


def test_the_built_module_has_every_function_of_its_source() -> None:
    """Fails on a module built from an older ``_speedups.c`` (a failed rebuild leaves the old
    shared object in place in a working tree, and the pure fallback hides it): every function
    of the source's method table is in the module in use."""
    if cannot_build():
        pytest.skip(cannot_build())
    if os.environ.get(speedups.PURE_ENV):
        pytest.skip(f"{speedups.PURE_ENV} is set for this run")
    source = pathlib.Path(speedups.__file__).with_name("_speedups.c").read_text()
    table = source[source.index("static PyMethodDef methods[]") :]
    table = table[: table.index("{NULL, NULL, 0, NULL}")]
    names = re.findall(r'^\s*\{"(\w+)",', table, flags=re.MULTILINE)
    assert len(names) > 10
    missing = [n for n in names if not hasattr(speedups.COMPILED, n)]
    assert not missing, f"the built module lacks {missing}: rebuild it (pip install -e .)"
