"""Compare the built-in tools with the reference implementation on generated inputs.

Not part of CI: it needs Node 20 and the reference package, installed once with

    npm install --prefix /tmp/piref --ignore-scripts @earendil-works/pi-coding-agent@0.85.0

and, for ``grep`` and ``find``, ripgrep and fd on PATH (checked with the ``ripgrep`` wheel's rg 14
and Debian's ``fd-find`` 8.6, whose ``fdfind`` the reference also finds). Then

    python scripts/compare_reference.py --reference /tmp/piref [--seed 1] [--cases 300] [--only functions,tools,grep]

Each case is run by the reference (``compare_reference.mjs``) and by our tools on the ``local:``
backend, in two identical temporary trees; outputs are compared byte for byte after the tree's
path and temp-file names are replaced by placeholders (grep lines are compared as sets, since
ripgrep's file order is not fixed). Every difference is printed; ``docs/parity.md`` lists the
expected ones (non-integer ``offset``/``limit``, ``truncateLine`` on a split emoji, the search
ignore-file rules of its section 3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(_REPO), str(_REPO / "proto")]  # as pytest's pythonpath, without installing

from agent_side import ToolCall, connect  # noqa: E402
from agent_side._validate import validate_tool_arguments  # noqa: E402
from agent_side.tools import create_tool  # noqa: E402
from agent_side.tools._edit_diff import generate_diff_string  # noqa: E402
from agent_side.tools._truncate import (  # noqa: E402
    format_size,
    truncate_head,
    truncate_line,
    truncate_tail,
)

HARNESS = Path(__file__).with_name("compare_reference.mjs")
ALPHABET = "abc xy'\u2019\u201c-\u2014\u00e9\u20ac"


def run_reference(reference: str, cases: list[dict[str, Any]], work: Path) -> list[Any]:
    cases_file = work / "cases.json"
    cases_file.write_text(json.dumps(cases))
    done = subprocess.run(
        ["node", str(HARNESS), reference, str(cases_file)], capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"reference harness failed:\n{done.stderr[:3000]}")
    result: list[Any] = json.loads(done.stdout)
    return result


# --- pure functions ---------------------------------------------------------------------------


def function_cases(rng: random.Random, count: int) -> tuple[list[dict[str, Any]], list[Any]]:
    def text() -> str:
        lines = ["".join(rng.choice("ab c\t\u20ac\u00e9x") for _ in range(rng.randint(0, 40)))
                 for _ in range(rng.randint(0, 30))]  # fmt: skip
        return "\n".join(lines) + ("\n" if rng.random() < 0.5 else "")

    cases: list[dict[str, Any]] = []
    ours: list[Any] = []
    for _ in range(count):
        content, lines, size = text(), rng.randint(1, 10), rng.randint(1, 200)
        head = rng.random() < 0.5
        cases.append({"fn": "truncateHead" if head else "truncateTail",
                      "args": [content, {"maxLines": lines, "maxBytes": size}]})  # fmt: skip
        cut = truncate_head if head else truncate_tail
        ours.append(cut(content, max_lines=lines, max_bytes=size).to_json())
        number = rng.choice([rng.randint(0, 3000), rng.randint(0, 3_000_000_000)])
        cases.append({"fn": "formatSize", "args": [number]})
        ours.append(format_size(number))
        line = "".join(rng.choice("a\u00e9") for _ in range(rng.randint(0, 700)))
        cases.append({"fn": "truncateLine", "args": [line]})
        cut_line, was_cut = truncate_line(line)
        ours.append({"text": cut_line, "wasTruncated": was_cut})
        old = text().replace("\t", "")
        rows = old.split("\n")
        for _ in range(rng.randint(0, 4)):
            rows[rng.randrange(len(rows))] = rng.choice(["a", "zz", "", "b c"])
        new = "\n".join(rows)
        cases.append({"fn": "generateDiffString", "args": [old, new]})
        diff, first = generate_diff_string(old, new)
        ours.append({"diff": diff, "firstChangedLine": first})
    return cases, ours


def compare_functions(reference: str, rng: random.Random, count: int, work: Path) -> int:
    cases, ours = function_cases(rng, count)
    differences = 0
    for case, theirs, mine in zip(cases, run_reference(reference, cases, work), ours, strict=True):
        value = theirs.get("value")
        if isinstance(value, dict) and "diff" in value:
            value.setdefault("firstChangedLine", None)
        if value != mine:
            differences += 1
            print(f"{case['fn']}: reference {value!r:.300}\n    ours {mine!r:.300}")
    print(f"functions: {len(cases)} cases, {differences} differences")
    return differences


# --- tools on disk ----------------------------------------------------------------------------


def random_file(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.05:
        return "y" * 60000 + "\nshort\n"
    if roll < 0.1:
        return "\n".join(f"Line {i}" for i in range(1, rng.choice([2001, 2500, 4000]) + 1))
    lines = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))
             for _ in range(rng.randint(0, 40))]  # fmt: skip
    text = "\n".join(lines) + ("\n" if rng.random() < 0.5 else "")
    if rng.random() < 0.2:
        text = text.replace("\n", "\r\n")
    if rng.random() < 0.1:
        text = "\ufeff" + text
    if rng.random() < 0.3:
        text = text.replace("\n", "   \n", 2)
    return text


def tool_case(rng: random.Random, tool: str) -> tuple[dict[str, str], dict[str, Any]]:
    files: dict[str, str] = {}
    if tool == "read":
        files["f.txt"] = random_file(rng)
        n = len(files["f.txt"].split("\n"))
        args: dict[str, Any] = {"path": rng.choice(["f.txt", "./f.txt", "@f.txt", "missing.txt"])}
        if rng.random() < 0.6:
            args["offset"] = rng.choice([0, -3, 1, 2, n // 2, n - 1, n, n + 1, 100])
        if rng.random() < 0.6:
            args["limit"] = rng.choice([0, 1, 2, 3, 10, 5000])
        return files, args
    if tool == "edit":
        content = random_file(rng)
        files["e.txt"] = content if len(content) < 5000 else "a\nb\n"
        plain = files["e.txt"].replace("\r\n", "\n").lstrip("\ufeff")
        edits = []
        for _ in range(rng.randint(0, 3)):
            if rng.random() < 0.6 and plain:
                start = rng.randrange(len(plain))
                old = plain[start : start + rng.randint(1, 15)]
                if rng.random() < 0.3:
                    old = old.replace("\u2019", "'").replace("\u2014", "-").replace("\u201c", '"')
            else:
                old = rng.choice(["zzz-not-there", "a", ""])
            edits.append({"oldText": old, "newText": rng.choice(["X", "", "new\ntext", old])})
        if edits and rng.random() < 0.15:
            return files, {"path": "e.txt", **edits[0]}
        return files, {"path": rng.choice(["e.txt", "missing.txt"]), "edits": edits}
    if tool == "ls":
        names = ["_x", "-y", ".env", ".git/", "#h", "~tmp", "10", "9", "a_b", "a-b", "a.b", "ab",
                 "b.txt", "B2", "e", "\u00e9", "f", "Zeta", "sub/", "sub/inner"]  # fmt: skip
        for name in rng.sample(names, rng.randint(0, len(names))):
            files[name] = "x"
        args = {"limit": rng.choice([0, 1, 3, 100])} if rng.random() < 0.5 else {}
        return files, args
    if tool == "write":
        path = rng.choice(["w.txt", "d/e/w.txt", "@w2.txt", "~draft.md"])
        return files, {"path": path, "content": random_file(rng)[:500]}
    command = rng.choice([
        "echo hi", "exit 3", "printf 'a\\nb'", "seq 1 3000", "seq 1 3000; exit 2",
        "head -c 60000 /dev/zero | tr '\\0' y", "head -c 60000 /dev/zero | tr '\\0' y; echo",
        "printf '\\xff\\xfe ok\\n'", "echo err 1>&2", "true", "printf ''; exit 1",
    ])  # fmt: skip
    return files, {"command": command}


def grep_case(rng: random.Random) -> tuple[dict[str, str], dict[str, Any]]:
    files: dict[str, str] = {}
    names = ["a.txt", "b.py", "sub/c.txt", "sub/deep/d.md", ".hidden/e.txt", "g.txt"]
    for name in rng.sample(names, rng.randint(1, len(names))):
        lines = ["".join(rng.choice("ab.c xAB\t") for _ in range(rng.randint(0, 12)))
                 for _ in range(rng.randint(0, 8))]  # fmt: skip
        files[name] = "\n".join(lines) + ("\n" if rng.random() < 0.7 else "")
    args: dict[str, Any] = {"pattern": rng.choice(["a", "b.c", "x+", "^a", "A", "c$", "zzz"])}
    for key, value in (("ignoreCase", True), ("literal", True), ("context", rng.choice([1, 2])),
                       ("glob", rng.choice(["*.txt", "*.py", "**/*.md"]))):  # fmt: skip
        if rng.random() < 0.3:
            args[key] = value
    if rng.random() < 0.3:
        args["path"] = rng.choice(list(files))
        if rng.random() < 0.5:
            args["limit"] = rng.choice([1, 2])
    return files, args


def lay_out(root: Path, files: dict[str, str | bytes]) -> None:
    root.mkdir(parents=True)
    for rel, data in files.items():
        target = root / rel
        if rel.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            target.write_bytes(data)
            continue
        with open(target, "w", newline="") as handle:
            handle.write(data)


# --- fixed calls: each difference once reported against the reference ------------------------

PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"
TREE: dict[str, str | bytes] = {
    "a.txt": "alpha\n",
    "b.txt": "beta\n",
    "c.txt": "gamma\n",
    "nested/x.py": "x = 1\n",
    "nested/deep/y.py": "y = 2\n",
    "src/m.py": "import os\n",
}
SRC_TREE: dict[str, str | bytes] = {
    "src/a.py": "a\n",
    "src/sub/b.py": "b\n",
    "lib/src/c.py": "c\n",
    "lib/src/deep/d.py": "d\n",
    "lib/x/src/e.py": "e\n",
}
PARENT_IGNORE_TREE: dict[str, str | bytes] = {
    ".git/": "",  # a repository: outside one, the reference's grep reads no .gitignore
    ".gitignore": "skip.txt\n/sub/top.txt\n",
    "sub/skip.txt": "hit\n",
    "sub/keep.txt": "hit\n",
    "sub/top.txt": "hit\n",
    "sub/deep/top.txt": "hit\n",
}
CALLS: list[tuple[str, dict[str, str | bytes], dict[str, Any]]] = [
    # read: image magic that does not decode
    ("read", {"bad.png": PNG_HEAD + b"\x00" * 40}, {"path": "bad.png"}),
    ("read", {"g.txt": "GIF8 is not an image\n"}, {"path": "g.txt"}),
    # one rule for fractional numbers (parity.md section 1)
    ("ls", TREE, {"limit": 2.5}),
    ("find", TREE, {"pattern": "*.txt", "limit": 1.5}),
    ("grep", TREE, {"pattern": "a", "limit": 1.5}),
    ("read", TREE, {"path": "a.txt", "offset": 1.5, "limit": 0.5}),
    # find: glob dialect, errors, limit 0
    ("find", TREE, {"pattern": "nested/**"}),
    ("find", TREE, {"pattern": "/src/*.py"}),
    ("find", TREE, {"pattern": "*.py", "path": "missing"}),
    ("find", TREE, {"pattern": "*.py", "path": "a.txt"}),
    ("find", TREE, {"pattern": "["}),
    ("find", TREE, {"pattern": "*.txt", "limit": 0}),
    ("find", SRC_TREE, {"pattern": "src/*.py"}),
    ("find", SRC_TREE, {"pattern": "src/*.py", "path": "lib"}),
    ("find", SRC_TREE, {"pattern": "src/*.py", "path": "lib/src"}),
    ("find", SRC_TREE, {"pattern": "**/src/*.py", "path": "lib/src"}),
    ("find", PARENT_IGNORE_TREE, {"pattern": "*.txt", "path": "sub"}),
    # grep: binary named explicitly, BOM, invalid regex, parent .gitignore
    ("grep", {"bin.dat": b"match here\x00\x01\nmatch again\n"}, {"pattern": "match", "path": "bin.dat"}),
    ("grep", {"bom.txt": "\ufeffmatch first\nmatch second\n"}, {"pattern": "match"}),
    ("grep", {"bom.txt": "\ufeffmatch first\n"}, {"pattern": "^match"}),
    ("grep", TREE, {"pattern": "(unclosed"}),
    ("grep", TREE, {"pattern": "a[b"}),
    ("grep", PARENT_IGNORE_TREE, {"pattern": "hit", "path": "sub"}),
]  # fmt: skip
VALIDATIONS: list[tuple[str, dict[str, Any]]] = [
    ("read", {"path": "a", "offset": "Infinity"}),
    ("read", {"path": "a", "offset": "-Infinity"}),
    ("ls", {"limit": "Infinity"}),
    ("read", {"path": "a", "extra": 1}),
    ("edit", {"path": "a", "edits": [{"oldText": "x", "newText": "y", "note": 1}]}),
]


async def validate_ours(cases: list[tuple[str, dict[str, Any]]], directory: Path) -> list[Any]:
    out: list[Any] = []
    async with connect(f"local:{directory}") as backend:
        for tool_name, args in cases:
            tool = create_tool(tool_name, str(directory), backend)
            try:
                value = validate_tool_arguments(
                    tool, ToolCall(id="c", name=tool_name, arguments=args)
                )
            except Exception as exc:
                out.append({"ok": False, "error": str(exc)})
                continue
            dumped = (
                value.model_dump(by_alias=True, exclude_unset=True)
                if hasattr(value, "model_dump")
                else value
            )
            out.append({"ok": True, "value": dumped})
    return out


def compare_calls(reference: str, work: Path) -> int:
    generated = []
    for index, (tool, files, args) in enumerate(CALLS):
        theirs_dir = work / "calls" / "ref" / f"c{index:04d}"
        ours_dir = work / "calls" / "ours" / f"c{index:04d}"
        lay_out(theirs_dir, files)
        lay_out(ours_dir, files)
        generated.append((tool, theirs_dir, ours_dir, args))
    cases: list[dict[str, Any]] = [
        {"tool": t, "dir": str(d), "args": a} for t, d, _, a in generated
    ]
    cases += [{"validate": name, "dir": str(work), "args": a} for name, a in VALIDATIONS]
    theirs = run_reference(reference, cases, work)
    ours = asyncio.run(run_ours([(t, d, a) for t, _, d, a in generated]))
    ours += asyncio.run(validate_ours(VALIDATIONS, work))
    differences = 0
    rows = [(t, str(r), str(o), a) for t, r, o, a in generated]
    rows += [(f"validate {name}", str(work), str(work), a) for name, a in VALIDATIONS]
    for (tool, theirs_dir, ours_dir, args), their, our in zip(rows, theirs, ours, strict=True):
        a = canonical(their, theirs_dir, False)
        b = canonical(our, ours_dir, False)
        if a != b:
            differences += 1
            print(
                f"{tool} {json.dumps(args, ensure_ascii=False):.200}\n  reference {a:.600}\n  ours      {b:.600}"
            )
    print(f"calls: {len(rows)} cases, {differences} differences")
    return differences


async def run_ours(cases: list[tuple[str, Path, dict[str, Any]]]) -> list[Any]:
    out: list[Any] = []
    for tool_name, directory, args in cases:
        async with connect(f"local:{directory}") as backend:
            tool = create_tool(tool_name, str(directory), backend)
            if tool.prepare_arguments is not None:
                args = tool.prepare_arguments(dict(args))
            try:
                params = validate_tool_arguments(
                    tool, ToolCall(id="c", name=tool_name, arguments=args)
                )
                result = await tool.execute("call", params, None, None)
            except Exception as exc:
                out.append({"ok": False, "error": str(exc)})
                continue
            content = [
                {"type": "text", "text": block.text}
                if block.type == "text"
                else {"type": block.type, "mimeType": block.mime_type}
                for block in result.content
            ]
            out.append({"ok": True, "content": content, "details": result.details})
    return out


def canonical(result: Any, directory: str, as_set: bool) -> str:
    text = json.dumps(result, sort_keys=True, ensure_ascii=False).replace(directory, "$DIR")
    text = re.sub(r"/[^\"\s]*/pi-bash-[0-9a-f]{16}\.log", "$LOG", text)
    if as_set and result.get("ok"):
        body, _, notice = result["content"][0]["text"].partition("\n\n[")
        return json.dumps([sorted(body.split("\n")), notice])
    return text


def compare_tools(
    reference: str, rng: random.Random, count: int, work: Path, grep_only: bool
) -> int:
    label = "grep" if grep_only else "tools"
    generated = []
    for index in range(count):
        if grep_only:
            tool, (files, args) = "grep", grep_case(rng)
        else:
            tool = rng.choice(["read", "read", "edit", "edit", "ls", "write", "bash"])
            files, args = tool_case(rng, tool)
        theirs_dir = work / label / "ref" / f"c{index:04d}"
        ours_dir = work / label / "ours" / f"c{index:04d}"
        lay_out(theirs_dir, files)
        lay_out(ours_dir, files)
        generated.append((tool, theirs_dir, ours_dir, args))
    theirs = run_reference(
        reference, [{"tool": t, "dir": str(d), "args": a} for t, d, _, a in generated], work
    )
    ours = asyncio.run(run_ours([(t, d, a) for t, _, d, a in generated]))
    differences = 0
    for (tool, theirs_dir, ours_dir, args), their, our in zip(generated, theirs, ours, strict=True):
        a = canonical(their, str(theirs_dir), grep_only)
        b = canonical(our, str(ours_dir), grep_only)
        if a != b or _tree(theirs_dir) != _tree(ours_dir):
            differences += 1
            print(
                f"{tool} {json.dumps(args, ensure_ascii=False):.200}\n  reference {a:.400}\n  ours      {b:.400}"
            )
    print(f"{label}: {count} cases, {differences} differences")
    return differences


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, help="the npm --prefix directory")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--only", default="calls,functions,tools,grep")
    options = parser.parse_args()
    rng = random.Random(options.seed)
    only = set(options.only.split(","))
    work = Path(tempfile.mkdtemp(prefix="compare-reference-"))
    os.environ["TMPDIR"] = str(work)  # both sides spill command output here
    tempfile.tempdir = str(work)
    try:
        differences = 0
        if "calls" in only:
            differences += compare_calls(options.reference, work)
        if "functions" in only:
            differences += compare_functions(options.reference, rng, options.cases, work)
        if "tools" in only:
            differences += compare_tools(options.reference, rng, options.cases, work, False)
        if "grep" in only:
            differences += compare_tools(options.reference, rng, options.cases, work, True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
