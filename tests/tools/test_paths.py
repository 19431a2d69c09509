"""Path handling (pi-tools 1.2 and the path-utils tests of 7.2)."""

from __future__ import annotations

import pytest

from agent_side.tools._paths import expand_path, resolve_read_path, resolve_to_cwd

HOME = "/home/u"
CWD = "/ws/sub"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("~", HOME),
        ("~/notes.md", f"{HOME}/notes.md"),
        ("~draft.md", "~draft.md"),
        ("@~draft.md", "~draft.md"),
        ("@@x", "@x"),
        ("file\u00a0name.txt", "file name.txt"),
        ("a\u3000b\u202fc", "a b c"),
        ("file:///tmp/a%20b", "/tmp/a b"),
    ],
)
def test_expand_path(given: str, expected: str) -> None:
    assert expand_path(given, home=HOME) == expected


def test_invalid_file_url_raises() -> None:
    with pytest.raises(ValueError, match="URI malformed"):
        expand_path("file:///%E0%A4%A", home=HOME)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/abs/x", "/abs/x"),
        ("x.txt", "/ws/sub/x.txt"),
        ("../y", "/ws/y"),
        ("~draft.md", "/ws/sub/~draft.md"),
        ("@~draft.md", "/ws/sub/~draft.md"),
        ("", "/ws/sub"),
        ("//etc/x", "/etc/x"),
        ("/a/%41", "/a/%41"),
    ],
)
def test_resolve_to_cwd(given: str, expected: str) -> None:
    assert resolve_to_cwd(given, CWD, home=HOME) == expected


@pytest.mark.parametrize(
    ("given", "on_disk"),
    [
        ("Screenshot 2024 at 10.00.00 AM.png", "Screenshot 2024 at 10.00.00\u202fAM.png"),
        ("shot 1.00 pm.png", "shot 1.00\u202fpm.png"),
        ("cafe\u0301.txt", "cafe\u0301.txt"),
        ("caf\u00e9.txt", "cafe\u0301.txt"),
        ("it's.txt", "it\u2019s.txt"),
        ("caf\u00e9's.txt", "cafe\u0301\u2019s.txt"),
        ("missing.txt", None),
    ],
)
async def test_resolve_read_path_variants(given: str, on_disk: str | None) -> None:
    files = {"/ws/" + on_disk} if on_disk else set()

    async def exists(path: str) -> bool:
        return path in files

    result = await resolve_read_path(given, "/ws", home=HOME, exists=exists)
    assert result == ("/ws/" + on_disk if on_disk else "/ws/" + given)
