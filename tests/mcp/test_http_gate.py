"""``opsbroker mcp --http``'s gate: a missing or wrong bearer token is 401 and audited as a
refusal, a foreign Origin is 403 unless allowed, and the server serves on afterwards; the audit
log names each token's principal; a network address needs explicit flags."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx2
import pytest

from broker import verify_files
from tests.cli._run import opsbroker

from ._client import CALL_TIMEOUT_S
from ._http import ALICE, BOB, KINDS, allow_origin_flag, http_server, http_session, write_tokens

LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _post(url: str, **headers: str) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=CALL_TIMEOUT_S) as http:
        return await http.post(url, json=LIST, headers={**ACCEPT, **headers})


@pytest.mark.parametrize("kind", KINDS)
async def test_tokens_origins_and_audit(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("open\n")
    audit = tmp_path / "audit.jsonl"
    args = ["--root", str(root), "--audit-log", str(audit)]
    flag = allow_origin_flag(kind)
    with http_server(tmp_path, *args, flag, "https://app.example", kind=kind) as url:
        missing = await _post(url)
        wrong = await _post(url, Authorization="Bearer not-a-token")
        basic = await _post(url, Authorization=f"Basic {ALICE}")
        foreign = await _post(url, Authorization=f"Bearer {ALICE}", Origin="http://evil.example")
        rebound = await _post(
            url, Authorization=f"Bearer {ALICE}", Origin="http://127.0.0.1.evil.example:80"
        )
        loopback = await _post(url, Authorization=f"Bearer {ALICE}", Origin="http://localhost:3000")
        allowed = await _post(url, Authorization=f"Bearer {ALICE}", Origin="https://app.example")
        elsewhere = await _post(
            url.removesuffix("/mcp") + "/other", Authorization=f"Bearer {ALICE}"
        )
        for response in (missing, wrong, basic):
            assert response.status_code == 401, response.text
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert "bearer token" in response.json()["error"]["message"]
        for response in (foreign, rebound):
            assert response.status_code == 403, response.text
            assert flag in response.json()["error"]["message"]
        assert loopback.status_code == 200 and allowed.status_code == 200
        assert elsewhere.status_code == 404
        for token in (ALICE, BOB):
            async with http_session(url, token) as session:
                with anyio.fail_after(CALL_TIMEOUT_S):
                    result = await session.call_tool("read", {"path": "a.txt"})
                assert not result.is_error
    ops = [json.loads(line) for line in audit.read_text().splitlines()]
    refusals = [op for op in ops if op.get("code") == "unauthenticated"]
    assert len(refusals) == 3, refusals
    assert all(op["principal"] is None and op["transport"] == "mcp" for op in refusals)
    assert all(op["peer"].startswith("127.0.0.1:") for op in refusals)
    reads = [op for op in ops if op.get("op") == "read_file"]
    assert sorted(op["principal"] for op in reads) == ["alice", "bob"]
    assert not any(
        ALICE in line or "not-a-token" in line for line in audit.read_text().splitlines()
    )
    assert verify_files([audit]).ok


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ([], "not a loopback address"),
        (["--http-allow-network"], "--http-token-file"),
    ],
)
def test_network_address_needs_explicit_flags(
    tmp_path: Path, extra: list[str], complaint: str
) -> None:
    done = opsbroker("mcp", "--root", str(tmp_path), "--http", "0.0.0.0:0", *extra)
    assert done.returncode == 2, done
    assert complaint in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_serve_network_address_needs_token_file(tmp_path: Path) -> None:
    done = opsbroker("serve", "--root", str(tmp_path), "--mcp-http", "0.0.0.0:0")
    assert done.returncode == 1, done
    assert "--token-file" in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_serve_allow_origin_needs_mcp_http(tmp_path: Path) -> None:
    done = opsbroker("serve", "--root", str(tmp_path), "--mcp-allow-origin", "https://x.example")
    assert done.returncode == 2, done
    assert "--mcp-allow-origin needs --mcp-http" in done.stderr, done.stderr


def test_group_readable_token_file_refused(tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    tokens.chmod(0o644)
    done = opsbroker(
        "mcp", "--root", str(tmp_path), "--http", "127.0.0.1:0", "--http-token-file", str(tokens)
    )
    assert done.returncode == 2, done
    assert "chmod 600" in done.stderr, done.stderr
