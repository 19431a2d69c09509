"""Bearer tokens: the tokens file, and constant-time lookup of the principal a token names.

The tokens file has one ``TOKEN PRINCIPAL`` pair per line; blank lines and ``#`` comments are
ignored. It must not be readable by group or others (like an SSH private key). When a broker
starts without one, :meth:`TokenTable.load_or_create` writes a fresh random token, mode 0600.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from operations import InvalidArgument, PermissionDenied

__all__ = ["DEFAULT_PRINCIPAL", "TOKEN_BYTES", "TokenTable"]

TOKEN_BYTES = 32  # 256 bits of entropy per generated token
DEFAULT_PRINCIPAL = "default"  # the principal of a generated token


class TokenTable:
    """Maps bearer tokens to principals. Lookups compare in constant time against every token."""

    def __init__(self, tokens: dict[str, str], *, path: Path | None = None) -> None:
        self._entries = [(token.encode(), principal) for token, principal in tokens.items()]
        self.path = path

    def __len__(self) -> int:
        return len(self._entries)

    def principal(self, token: str) -> str | None:
        """The principal ``token`` names, or ``None``. Takes the same time for every wrong token."""
        presented = token.encode("utf-8", "surrogateescape")
        found: str | None = None
        for known, principal in self._entries:
            if hmac.compare_digest(known, presented):
                found = principal
        return found

    @classmethod
    def load(cls, path: Path) -> TokenTable:
        """Read a tokens file.

        Raises:
            PermissionDenied: the file is readable by group or others.
            InvalidArgument: a line is not ``TOKEN PRINCIPAL``, or the file holds no token.
        """
        mode = path.stat().st_mode
        if stat.S_IMODE(mode) & 0o077:
            raise PermissionDenied(
                "load tokens",
                str(path),
                f"tokens file has mode {stat.S_IMODE(mode):04o}; run `chmod 600 {path}`",
            )
        tokens: dict[str, str] = {}
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            if len(fields) != 2:
                raise InvalidArgument(
                    "load tokens", str(path), f"line {number}: expected 'TOKEN PRINCIPAL'"
                )
            tokens[fields[0]] = fields[1]
        if not tokens:
            raise InvalidArgument("load tokens", str(path), "no token in the file")
        return cls(tokens, path=path)

    @classmethod
    def load_or_create(cls, path: Path) -> TokenTable:
        """Read ``path``; if nothing is there, first create it (mode 0600) with one fresh token."""
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            token = secrets.token_urlsafe(TOKEN_BYTES)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(
                    f"# opsbroker bearer tokens: TOKEN PRINCIPAL\n{token} {DEFAULT_PRINCIPAL}\n"
                )
        return cls.load(path)
