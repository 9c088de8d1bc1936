"""Self-signed certificates for the TLS tests, made with the ``openssl`` command line tool."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest


def make_cert(directory: pathlib.Path, name: str = "server") -> tuple[pathlib.Path, pathlib.Path]:
    """A self-signed certificate for ``localhost`` / 127.0.0.1 and its key (PEM)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the TLS tests need the `openssl` command line tool on PATH")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key
