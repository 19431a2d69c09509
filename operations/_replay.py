"""Replaying a cassette on the memory backend (``InMemoryOperations.from_cassette``).

The recorded tree seeds the virtual tree; file operations then run on it as on any memory
backend (an edit the agent makes is really made). Commands are answered from the recording,
matched by shell, command, cwd and the :class:`~operations._cassette.WrittenState` digest (what the
session's own file changes have made of the tree): a command run after the agent changed other
files than when it was recorded is a :class:`CassetteMismatch`, never a stale answer. A replayed
command emits its recorded chunks with their recorded gaps over the backend's virtual time
(``time_scale``), so timeouts and progress updates behave as recorded, then applies the changes the
command made to the tree, then exits with the recorded code (or waits for the recorded kill).

Modes:

- ``"strict"``: commands must come in the recorded order; the next one must be the next recorded.
- ``"once"``: any order; each recorded run answers once (runs of one command in recorded order).
- ``"new_episodes"``: as ``"once"``, but a command with no recording runs on ``live`` and is
  appended to the cassette (the live backend should hold the same tree as the recording).

Files the policy refused to read were recorded without content: they are refused the same way on
replay (``PolicyDenied`` with the recorded rule). A file left out of the snapshot for its size is
present with its mode, but reading it is a :class:`CassetteMismatch`.
"""

from __future__ import annotations

import difflib
import os
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ._abort import AbortSignal
from ._cassette import (
    TREE_EVENTS,
    CassetteError,
    WrittenState,
    decode_bytes,
    error_from_json,
    read_cassette,
)
from ._gate import Gate
from ._memory import File, InMemoryOperations, Symlink
from ._policy import Policy, PolicyEnforcer
from ._protocols import Backend
from ._runner import CommandContext, CommandRunner
from ._types import ExecResult, KillReason, OnData, SearchMatch
from ._vfs import DirNode

__all__ = ["KILL_GRACE_S", "CassetteMismatch", "ReplayMode", "ReplayOperations"]

ReplayMode = Literal["strict", "once", "new_episodes"]

KILL_GRACE_S = 60.0
"""Virtual seconds a command recorded as killed waits past its recorded end for the kill; then
the replay reports that nothing killed it (a different timeout, or no abort)."""

NEAREST = 3
"""Recorded commands a mismatch names."""


class CassetteMismatch(CassetteError):
    """A call the cassette has no answer for (the message says what was asked, and the nearest
    recorded candidates)."""


@dataclass(slots=True)
class _Run:
    """One recorded command run."""

    line: int
    key: tuple[str, str, str, str]
    chunks: list[tuple[float, bytes]]
    exit: int | None
    kill: str | None
    tail: float
    error: dict[str, Any] | None
    effects: list[dict[str, Any]] = field(default_factory=list)


def _run_of(line: int, data: dict[str, Any], where: str) -> _Run:
    chunks: list[tuple[float, bytes]] = []
    for delay, piece in data["chunks"]:
        raw = piece.encode() if isinstance(piece, str) else decode_bytes(piece)
        chunks.append((max(0.0, float(delay)), raw))
    kill = data.get("kill")
    if kill is not None and kill not in {k.value for k in KillReason}:
        raise CassetteError(f"{where}: unknown kill reason {kill!r}")
    code = data.get("exit")
    if kill is None and data.get("error") is None and not isinstance(code, int):
        raise CassetteError(f"{where}: 'exit' must be an integer")
    key = (data["shell"], data["command"], data["cwd"], data["state"])
    return _Run(line, key, chunks, code, kill, float(data.get("tail") or 0.0), data.get("error"))


def _describe(key: tuple[str, str, str, str]) -> str:
    shell, command, cwd, state = key
    return f"{command!r} in {cwd!r} ({shell}, state {state[:12]})"


class ReplayOperations(InMemoryOperations):
    """The memory backend over a cassette's tree, answering commands from its recording.

    Made by :meth:`InMemoryOperations.from_cassette`. :attr:`mismatches` lists every call the
    cassette could not answer (each was also raised), for a harness to assert on at the end.
    """

    def __init__(
        self,
        cassette: str | os.PathLike[str],
        *,
        mode: ReplayMode = "strict",
        live: Backend | None = None,
        **options: Any,
    ) -> None:
        if mode not in ("strict", "once", "new_episodes"):
            raise ValueError(f"mode must be 'strict', 'once' or 'new_episodes', not {mode!r}")
        if mode == "new_episodes" and live is None:
            raise ValueError("mode 'new_episodes' needs a live backend (live=...) for new commands")
        self.cassette = Path(cassette)
        header, events = read_cassette(self.cassette)
        super().__init__(root=str(options.pop("root", header["root"])), **options)
        self.mode: ReplayMode = mode
        self.live = live
        self.state = WrittenState()
        self.mismatches: list[CassetteMismatch] = []
        self.operations_recorded = 0
        self._omitted: dict[str, str] = {}
        deny = [str(g) for g in header.get("deny_read") or []]
        self._runs: dict[tuple[str, str, str, str], deque[_Run]] = {}
        self._order: deque[_Run] = deque()
        last: _Run | None = None
        try:
            for event in events:
                where = f"{self.cassette}:{event.line}"
                kind = event.kind
                if kind in TREE_EVENTS:
                    self._apply([event.data], deny)
                elif kind == "effect":
                    if last is None:
                        raise CassetteError(f"{where}: an effect with no command before it")
                    last.effects.extend(event.data["changes"])
                elif kind == "exec":
                    last = _run_of(event.line, event.data, where)
                    self._runs.setdefault(last.key, deque()).append(last)
                    self._order.append(last)
                else:
                    self.operations_recorded += 1
        finally:
            events.close()
        self._enforcer = PolicyEnforcer(Policy(deny_read=deny, deny_write=[])) if deny else None
        self._recorder: Any = None
        self.commands.register(lambda command: True, self._bash)
        self.powershell.commands.register(lambda command: True, self._powershell_run)

    # -- the tree -----------------------------------------------------------------------------

    def _apply(self, changes: Iterable[dict[str, Any]], deny: list[str]) -> None:
        for change in changes:
            path = f"{self.root}/{change['path']}"
            kind = change["t"]
            if kind == "dir":
                self.vfs.make_dirs(path).mode = int(change["mode"])
            elif kind == "link":
                self.seed({path: Symlink(str(change["target"]))})
            elif kind == "gone":
                parent_path, _, name = path.rpartition("/")
                parent = self.vfs.make_dirs(parent_path) if parent_path else self.vfs.top
                if isinstance(parent, DirNode):
                    parent.children.pop(name, None)
            else:
                self._omitted.pop(path, None)
                if "denied" in change:
                    rule = str(change["denied"])
                    if rule.startswith("deny_read: ") and rule[11:] not in deny:
                        deny.append(rule[11:])
                    data = b""
                elif "omitted" in change:
                    self._omitted[path] = str(change["omitted"])
                    data = b""
                else:
                    data = decode_bytes(change)
                mtime = change.get("mtime")
                mode = int(change["mode"])
                self.seed({path: File(data, mode, None if mtime is None else float(mtime))})

    def _gate(self, op: str, path: str, gate: Gate | None) -> Gate | None:
        if gate is None and self._enforcer is not None:
            return Gate(self._enforcer, op, path)
        return gate

    def _check_omitted(self, op: str, path: str) -> None:
        reason = self._omitted.get(path)
        if reason is not None:
            raise self._mismatch(
                CassetteMismatch(
                    f"{op} {path!r}: the cassette {str(self.cassette)!r} has no content for this "
                    f"file ({reason}); record again with a smaller tree or a larger bound"
                )
            )

    def _mismatch(self, error: CassetteMismatch) -> CassetteMismatch:
        self.mismatches.append(error)
        return error

    # -- file operations: the recorded policy's refusals, and the written-state digest ---------

    async def read_file(self, path: str, *, gate: Gate | None = None) -> bytes:
        data = await super().read_file(path, gate=self._gate("read_file", path, gate))
        self._check_omitted("read_file", path)
        return data

    async def detect_image_mime_type(self, path: str, *, gate: Gate | None = None) -> str | None:
        gate = self._gate("detect_image_mime_type", path, gate)
        mime = await super().detect_image_mime_type(path, gate=gate)
        self._check_omitted("detect_image_mime_type", path)
        return mime

    async def access(self, path: str, *, writable: bool = False, gate: Gate | None = None) -> None:
        gate = self._gate("access", path, gate)
        await super().access(path, writable=writable, gate=gate)

    async def glob(
        self,
        pattern: str,
        cwd: str,
        *,
        ignore: Sequence[str] = (),
        limit: int = 1000,
        gate: Gate | None = None,
    ) -> list[str]:
        gate = self._gate("glob", cwd, gate)
        return await super().glob(pattern, cwd, ignore=ignore, limit=limit, gate=gate)

    async def search(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        limit: int = 100,
        gate: Gate | None = None,
    ) -> AsyncIterator[SearchMatch]:
        found = super().search(
            pattern,
            path,
            glob=glob,
            ignore_case=ignore_case,
            literal=literal,
            limit=limit,
            gate=self._gate("search", path, gate),
        )
        async for match in found:
            yield match

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        await super().write_file(path, content, mode=mode, gate=gate)
        self._omitted.pop(path, None)
        self.state.wrote(path, content)

    async def mkdir(self, path: str, *, gate: Gate | None = None) -> None:
        await super().mkdir(path, gate=gate)
        self.state.made_dir(path)

    async def remove(self, path: str, *, recursive: bool = False, gate: Gate | None = None) -> None:
        await super().remove(path, recursive=recursive, gate=gate)
        self.state.removed(path)

    async def rename(self, source: str, destination: str, *, gate: Gate | None = None) -> None:
        await super().rename(source, destination, gate=gate)
        self.state.renamed(source, destination)

    # -- commands -----------------------------------------------------------------------------

    async def _exec(
        self,
        runner: CommandRunner,
        op: str,
        command: str,
        cwd: str,
        on_data: OnData,
        signal: AbortSignal | None,
        timeout: float | None,
        env: Mapping[str, str] | None,
        gate: Gate | None = None,
    ) -> ExecResult:
        # A command the live backend refused before it ran (its cwd, the policy) is refused
        # again with the recorded error, word for word, before the memory backend's own checks.
        shell = "bash" if runner is self.commands else "powershell"
        key = (shell, command, cwd, self.state.digest())
        queue = self._runs.get(key)
        head = self._order[0] if self.mode == "strict" and self._order else None
        upcoming = head if self.mode == "strict" else (queue[0] if queue else None)
        if upcoming is not None and upcoming.key == key and upcoming.error is not None:
            self._take(key)
            error = error_from_json(upcoming.error)
            self._note(op, cwd, error.code, command)
            raise error
        return await super()._exec(runner, op, command, cwd, on_data, signal, timeout, env, gate)

    async def _bash(self, ctx: CommandContext) -> int:
        return await self._answer("bash", ctx)

    async def _powershell_run(self, ctx: CommandContext) -> int:
        return await self._answer("powershell", ctx)

    def _take(self, key: tuple[str, str, str, str]) -> _Run | CassetteMismatch:
        if self.mode == "strict":
            if self._order and self._order[0].key == key:
                run = self._order.popleft()
                self._runs[key].popleft()
                return run
            expected = (
                f"the next recorded command is {_describe(self._order[0].key)} "
                f"(line {self._order[0].line})"
                if self._order
                else "every recorded command has been replayed"
            )
            return CassetteMismatch(
                f"exec {_describe(key)}: not the next command of {str(self.cassette)!r} "
                f"(mode 'strict'): {expected}{self._nearest(key)}"
            )
        queue = self._runs.get(key)
        if queue:
            return queue.popleft()  # (the recorded order is only kept for 'strict')
        return CassetteMismatch(
            f"exec {_describe(key)}: not in cassette {str(self.cassette)!r}{self._nearest(key)}"
        )

    def _nearest(self, key: tuple[str, str, str, str]) -> str:
        _, command, cwd, state = key
        same_place = [k for k in self._runs if k[:3] == key[:3]]
        if same_place:
            unplayed = [k for k in same_place if self._runs[k]]
            if not unplayed:
                return "; it was recorded, and every recorded run of it has been replayed"
            states = ", ".join(k[3][:12] for k in unplayed)
            return (
                f"; it was recorded with other inputs (state {states}, now {state[:12]}): the "
                "files the session changed before it differ from the recording"
            )
        recorded = {f"{k[1]} @ {k[2]}": k for k in self._runs}
        close = difflib.get_close_matches(f"{command} @ {cwd}", list(recorded), n=NEAREST, cutoff=0)
        if not close:
            return "; the cassette records no commands"
        return "; nearest recorded: " + ", ".join(_describe(recorded[c]) for c in close)

    async def _answer(self, shell: str, ctx: CommandContext) -> int:
        key = (shell, ctx.command, ctx.cwd, self.state.digest())
        run = self._take(key)
        if isinstance(run, CassetteMismatch):
            if self.mode == "new_episodes":
                return await self._live(shell, ctx)
            raise self._mismatch(run)
        for delay, data in run.chunks:
            if delay:
                await ctx.sleep(delay)
            await ctx.emit(data)
        self._apply(run.effects, self._deny_list())
        if run.kill is None:
            assert run.exit is not None
            return run.exit
        await ctx.sleep(run.tail + KILL_GRACE_S)
        raise self._mismatch(
            CassetteMismatch(
                f"exec {_describe(key)}: recorded as killed ({run.kill}, line {run.line}), but "
                f"nothing killed it within {KILL_GRACE_S} s more: replay it with the recorded "
                "timeout (or abort)"
            )
        )

    def _deny_list(self) -> list[str]:
        return [] if self._enforcer is None else list(self._enforcer.policy.deny_read)

    async def _live(self, shell: str, ctx: CommandContext) -> int:
        """Run a command the cassette lacks on the live backend, and append it (new_episodes)."""
        from ._recording import RecordingBackend

        if self._recorder is None:
            assert self.live is not None
            self._recorder = RecordingBackend(
                self.live, self.cassette, append=True, state=self.state
            )
        recorder: RecordingBackend = self._recorder
        ops = recorder if shell == "bash" else recorder.powershell
        result = await ops.exec(ctx.command, ctx.cwd, on_data=ctx.emit, env=ctx.env or None)
        self._apply(recorder.last_effects, self._deny_list())
        if result.kill_reason is not None:
            raise CassetteMismatch(
                f"exec {ctx.command!r}: killed live ({result.kill_reason.value})"
            )
        assert result.exit_code is not None
        return result.exit_code

    async def aclose(self) -> None:
        """Close the replay (and the live backend of ``new_episodes``, with its cassette)."""
        await super().aclose()
        if self._recorder is not None:
            await self._recorder.aclose()
        elif self.live is not None:
            await self.live.aclose()
