"""A dict-backed tree with the walk callbacks of operations._walk, for the pure-rule tests.

Keys are relative paths; ``"d/": None`` is a directory, ``bytes`` a file, ``str`` a symlink.
"""

from __future__ import annotations

from collections.abc import Iterator

from operations import FileKind, NotFound


class TreeCallbacks:
    def __init__(self, entries: dict[str, bytes | str | None]) -> None:
        self.entries = {key.rstrip("/"): value for key, value in entries.items()}
        for key in list(self.entries):
            parts = key.split("/")
            for i in range(1, len(parts)):
                self.entries.setdefault("/".join(parts[:i]), None)

    def list_dir(self, rel: str) -> Iterator[tuple[str, FileKind]]:
        if rel and self.entries.get(rel, b"") is not None:
            raise NotFound("list_dir", rel)
        prefix = rel + "/" if rel else ""
        for key, value in self.entries.items():
            if key.startswith(prefix) and "/" not in key[len(prefix) :]:
                if value is None:
                    kind = FileKind.DIRECTORY
                elif isinstance(value, str):
                    kind = FileKind.SYMLINK
                else:
                    kind = FileKind.FILE
                yield key[len(prefix) :], kind

    def read_file(self, rel: str) -> bytes | None:
        value = self.entries.get(rel)
        return value if isinstance(value, bytes) else None
