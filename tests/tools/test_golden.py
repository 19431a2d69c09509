"""The model-visible text of every tool for one fixed workspace: the same on every backend.

Each call's text (result or error) is compared with ``GOLDEN``, with the backend's root shown as
``$ROOT``. A backend whose files, errors or listings differ in any byte fails here. The error
texts at the end are those the reference implementation prints for the same calls on disk.
"""

from __future__ import annotations

from typing import Any

from agent_side.tools import create_all_tools
from operations._runner import CommandContext
from tests.tools._call import call
from tests.tools.conftest import ToolWorkspace

WORKSPACE = {
    "README.md": "# Demo\n\nA small project.\n",
    "src/app.py": "def main():\n    print('hello')\n\n\ndef helper(x):\n    return x * 2\n",
    "src/util/__init__.py": "",
    "src/util/strings.py": "def shout(s):\n    return s.upper() + '!'\n",
    "docs/notes.txt": "\n".join(f"note {i}" for i in range(1, 31)) + "\n",
    ".env": "SECRET=1\n",
    ".gitignore": "build/\n",
    "build/out.bin": "ignored\n",
}

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read", {"path": "README.md"}),
    ("read", {"path": "docs/notes.txt", "offset": 10, "limit": 3}),
    ("read", {"path": "docs/notes.txt", "offset": 40}),
    ("read", {"path": "nope.txt"}),
    ("ls", {}),
    ("ls", {"path": "src"}),
    ("find", {"pattern": "*.py"}),
    ("find", {"pattern": "src/**"}),
    ("grep", {"pattern": "def "}),
    ("grep", {"pattern": "return", "context": 1, "path": "src"}),
    ("write", {"path": "out/new.txt", "content": "fresh\n"}),
    ("edit", {"path": "src/app.py", "edits": [{"oldText": "x * 2", "newText": "x * 3"}]}),
    ("edit", {"path": "src/app.py", "edits": [{"oldText": "def", "newText": "fn"}]}),
    ("read", {"path": "../escape.txt"}),
    ("bash", {"command": "echo hello; exit 2"}),
    ("read", {"path": "src"}),
    ("write", {"path": "README.md/x", "content": "y"}),
    ("write", {"path": "src", "content": "y"}),
    ("edit", {"path": "docs", "edits": [{"oldText": "a", "newText": "b"}]}),
    ("ls", {"path": "README.md"}),
    ("read", {"path": "README.md/x"}),
]

GOLDEN = [
    "# Demo\n\nA small project.\n",
    "note 10\nnote 11\nnote 12\n\n[19 more lines in file. Use offset=13 to continue.]",
    "Offset 40 is beyond end of file (31 lines total)",
    "ENOENT: no such file or directory, access '$ROOT/nope.txt'",
    ".env\n.gitignore\nbuild/\ndocs/\nREADME.md\nsrc/",
    "app.py\nutil/",
    "src/app.py\nsrc/util/__init__.py\nsrc/util/strings.py",
    "src/app.py\nsrc/util/\nsrc/util/__init__.py\nsrc/util/strings.py",
    "src/app.py:1: def main():\nsrc/app.py:5: def helper(x):\nsrc/util/strings.py:1: def shout(s):",
    "app.py-5- def helper(x):\napp.py:6:     return x * 2\napp.py-7- \n"
    "util/strings.py-1- def shout(s):\nutil/strings.py:2:     return s.upper() + '!'\n"
    "util/strings.py-3- ",
    "Successfully wrote to out/new.txt",
    "Successfully replaced 1 block(s) in src/app.py.",
    "Found 2 occurrences of the text in src/app.py. The text must be unique. Please provide more "
    "context to make it unique.",
    "ESCAPES_ROOT: path escapes the workspace root, access '$PARENT/escape.txt'",
    "hello\n\n\nCommand exited with code 2",
    "EISDIR: illegal operation on a directory, read",
    "EEXIST: file already exists, mkdir '$ROOT/README.md'",
    "EISDIR: illegal operation on a directory, open '$ROOT/src'",
    "EISDIR: illegal operation on a directory, read",
    "Not a directory: $ROOT/README.md",
    "ENOTDIR: not a directory, access '$ROOT/README.md/x'",
]


async def _hello(ctx: CommandContext) -> int:
    await ctx.emit("hello\n")
    return 2


async def test_golden_outputs(tw: ToolWorkspace) -> None:
    for rel, content in WORKSPACE.items():
        tw.write(rel, content)
    tw.script("echo hello; exit 2", _hello)
    tools = {tool.name: tool for tool in create_all_tools(tw.root, tw.ops)}
    seen: list[str] = []
    for name, args in CALLS:
        try:
            out = (await call(tools[name], **args)).content[0].text  # type: ignore[union-attr]
        except Exception as exc:
            out = str(exc)
        parent = tw.root.rsplit("/", 1)[0] or ""
        seen.append(out.replace(tw.root, "$ROOT").replace(parent + "/escape", "$PARENT/escape"))
    assert seen == GOLDEN
    assert tw.read("out/new.txt") == b"fresh\n"
