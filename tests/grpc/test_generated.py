"""The committed generated code matches what ``scripts/gen_proto`` makes from ``proto/`` today."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTO = REPO / "proto"

# Lines that name the generator's own version: they differ between grpcio-tools releases without
# the contract changing, so the comparison ignores them.
_VERSION_LINE = re.compile(
    r"^(# Protobuf Python Version:.*|GRPC_GENERATED_VERSION = .*|\s+\d+,\s*)$", re.MULTILINE
)


def _normalise(text: str) -> str:
    return _VERSION_LINE.sub("<version>", text)


def test_generated_code_matches_proto(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_proto"), str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*_pb2*.py*"))
    committed = sorted(p.relative_to(PROTO) for p in PROTO.rglob("*_pb2*.py*"))
    assert fresh, "gen_proto produced nothing"
    assert fresh == committed, "generated files differ: run scripts/gen_proto and commit"
    for rel in fresh:
        new = _normalise((tmp_path / rel).read_text())
        old = _normalise((PROTO / rel).read_text())
        assert new == old, f"{rel} is stale: run scripts/gen_proto and commit the result"


def test_generated_modules_import_by_package_name() -> None:
    from opsbroker.v1 import broker_pb2, broker_pb2_grpc

    assert broker_pb2.DESCRIPTOR.package == "opsbroker.v1"
    assert hasattr(broker_pb2_grpc, "BrokerStub")
