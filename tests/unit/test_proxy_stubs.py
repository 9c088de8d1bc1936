"""The checked-in gRPC stubs of the RocketMQ 5 endpoint are exactly what ``make proto`` produces
from ``src/rocketq/proxy/v2/*.proto``, and the schema carries the names the official SDKs call."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from rocketq.proxy.v2 import definition_pb2, service_pb2

ROOT = pathlib.Path(__file__).resolve().parents[2]
V2 = ROOT / "src" / "rocketq" / "proxy" / "v2"
GENERATED = [
    "definition_pb2.py",
    "definition_pb2.pyi",
    "definition_pb2_grpc.py",
    "service_pb2.py",
    "service_pb2.pyi",
    "service_pb2_grpc.py",
]


def test_regenerating_the_stubs_gives_identical_files(tmp_path: pathlib.Path) -> None:
    protos = sorted(str(p.relative_to(ROOT / "src")) for p in V2.glob("*.proto"))
    assert protos == ["rocketq/proxy/v2/definition.proto", "rocketq/proxy/v2/service.proto"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            *protos,
        ],
        cwd=ROOT / "src",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = tmp_path / "rocketq" / "proxy" / "v2"
    for name in GENERATED:
        assert (out / name).read_bytes() == (V2 / name).read_bytes(), f"{name} is stale: run `make proto`"


def test_service_paths_and_key_field_numbers() -> None:
    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert service.full_name == "apache.rocketmq.v2.MessagingService"
    methods = {m.name: (m.client_streaming, m.server_streaming) for m in service.methods}
    assert methods["Telemetry"] == (True, True)
    assert methods["ReceiveMessage"] == (False, True)
    assert methods["SendMessage"] == (False, False)
    props = definition_pb2.SystemProperties.DESCRIPTOR.fields_by_name
    assert props["receipt_handle"].number == 12
    assert props["delivery_attempt"].number == 16
    assert props["message_group"].number == 17
    assert definition_pb2.Code.Value("TOPIC_NOT_FOUND") == 40402
    assert definition_pb2.Code.Value("MESSAGE_BODY_TOO_LARGE") == 41301
    cmd = service_pb2.TelemetryCommand.DESCRIPTOR.fields_by_name
    assert cmd["recover_orphaned_transaction_command"].number == 5
