"""A 1 GiB PUT and GET through the REST API keep the broker's memory flat (issue 18's bar:
RSS growth under 64 MiB): the body streams to the atomic write and from the file, never whole."""

from __future__ import annotations

import hashlib
import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Sandboxd, start_broker, stop_broker

SIZE = 1 << 30
PIECE = 1 << 20
MAX_GROWTH = 64 << 20

POLICY = f"max_read_bytes = {2 * SIZE}\nmax_write_bytes = {2 * SIZE}\n"


def _rss(pid: int) -> int:
    """The resident set of process ``pid``, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _generated(digest: hashlib._Hash) -> Iterator[bytes]:
    """SIZE bytes, made as they are sent (nothing kept): a counter in each piece."""
    for index in range(SIZE // PIECE):
        piece = index.to_bytes(8, "big") * (PIECE // 8)
        digest.update(piece)
        yield piece


def _connection(broker: Sandboxd) -> http.client.HTTPConnection:
    host, port = broker.http.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=120)


@pytest.mark.slow
def test_a_1_gib_put_and_get_keep_broker_rss_flat(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, policy=POLICY)
    target = broker.root / "big.bin"
    try:
        pid = broker.process.pid
        before = _rss(pid)
        peak = before
        sent = hashlib.sha256()
        conn = _connection(broker)
        try:
            conn.putrequest("PUT", "/v1/files/big.bin")
            conn.putheader("X-Opsbroker-Token", broker.token)
            conn.putheader("Content-Length", str(SIZE))
            conn.endheaders()
            for number, piece in enumerate(_generated(sent)):
                conn.send(piece)
                if number % 64 == 0:
                    peak = max(peak, _rss(pid))
            response = conn.getresponse()
            assert response.status == 204, response.read()
            response.read()
        finally:
            conn.close()
        assert target.stat().st_size == SIZE
        peak = max(peak, _rss(pid))

        received = hashlib.sha256()
        total = 0
        conn = _connection(broker)
        try:
            conn.request("GET", "/v1/files/big.bin", headers={"X-Opsbroker-Token": broker.token})
            response = conn.getresponse()
            assert response.status == 200
            for number in range(2 * SIZE // PIECE):  # bounded: the body is SIZE bytes
                piece = response.read(PIECE)
                if not piece:
                    break
                total += len(piece)
                received.update(piece)
                if number % 64 == 0:
                    peak = max(peak, _rss(pid))
        finally:
            conn.close()
        assert total == SIZE and received.digest() == sent.digest()
        peak = max(peak, _rss(pid))
        assert peak - before < MAX_GROWTH, f"broker RSS grew {(peak - before) >> 20} MiB"
    finally:
        target.unlink(missing_ok=True)
        stop_broker(broker)
