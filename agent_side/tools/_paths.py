"""How a tool turns the path a model wrote into an absolute path in the backend's namespace.

The reference's rules, on POSIX paths: unicode spaces become plain spaces, one leading ``@`` is
dropped (models copy ``@file`` mentions), ``~`` and ``~/x`` expand to the home directory, a
``file://`` URL becomes its path, and a relative path is resolved against the tool's current
working directory. Nothing is checked here: confinement is the backend's job, so ``../../etc``
resolves lexically and the backend then refuses it.

On a backend "home" is the workspace root unless the caller names another directory: the
agent's own home directory means nothing on a remote workspace.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
import urllib.parse
from collections.abc import Awaitable, Callable

__all__ = [
    "expand_path",
    "read_path_variants",
    "resolve_read_path",
    "resolve_to_cwd",
]

_UNICODE_SPACES = re.compile("[\u00a0\u2000-\u200a\u202f\u205f\u3000]")
_AM_PM = re.compile(r" (AM|PM)\.", re.IGNORECASE)
_NARROW_NBSP = "\u202f"
_CURLY_APOSTROPHE = "\u2019"


def expand_path(path: str, *, home: str) -> str:
    """Apply the reference's normalisation (spaces, ``@``, ``~``, ``file://``) without resolving.

    Raises:
        ValueError: ``path`` is a ``file://`` URL that does not decode to a local path.
    """
    path = _UNICODE_SPACES.sub(" ", path)
    if path.startswith("@"):
        path = path[1:]
    if path == "~":
        path = home
    elif path.startswith("~/"):
        path = posixpath.join(home, path[2:])
    if path.startswith("file://"):
        path = _file_url_to_path(path)
    return path


def _file_url_to_path(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f'File URL host must be "localhost" or empty: {url}')
    if re.search("%2f", parts.path, re.IGNORECASE):
        raise ValueError(f"File URL path must not include encoded / characters: {url}")
    if re.search(r"%(?![0-9a-fA-F]{2})", parts.path):
        raise ValueError(f"URI malformed: {url}")
    try:
        return urllib.parse.unquote_to_bytes(parts.path).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"URI malformed: {url}") from None


def _resolve(base: str, path: str) -> str:
    joined = path if path.startswith("/") else posixpath.join(base, path)
    resolved = posixpath.normpath(joined)
    # Like Node's path.resolve: POSIX's special leading "//" is not kept.
    return "/" + resolved.lstrip("/") if resolved.startswith("//") else resolved


def resolve_to_cwd(path: str, cwd: str, *, home: str) -> str:
    """Resolve a tool's ``path`` argument against ``cwd`` (itself absolute)."""
    return _resolve(cwd, expand_path(path, home=home))


def read_path_variants(resolved: str) -> list[str]:
    """The other spellings ``read`` tries for a missing file, in the reference's order.

    macOS writes screenshot names with U+202F before ``AM``/``PM``, stores names decomposed (NFD)
    and prefers a curly apostrophe; a model types none of these.
    """
    nfd = unicodedata.normalize("NFD", resolved)
    candidates = [
        _AM_PM.sub(lambda m: f"{_NARROW_NBSP}{m.group(1)}.", resolved),
        nfd,
        resolved.replace("'", _CURLY_APOSTROPHE),
        nfd.replace("'", _CURLY_APOSTROPHE),
    ]
    return [c for c in candidates if c != resolved]


async def resolve_read_path(
    path: str, cwd: str, *, home: str, exists: Callable[[str], Awaitable[bool]]
) -> str:
    """Like :func:`resolve_to_cwd`, then the first existing variant if the path does not exist.

    When nothing exists the plain resolution is returned; the read then fails on it.
    """
    resolved = resolve_to_cwd(path, cwd, home=home)
    if await exists(resolved):
        return resolved
    for candidate in read_path_variants(resolved):
        if await exists(candidate):
            return candidate
    return resolved
