"""The rules docs/kubernetes/Dockerfile keeps, checked on BuildKit's own parse of it.

No Dockerfile linter is packaged for Debian (``apt-cache search hadolint`` finds nothing), so
these few rules stand in for the hadolint checks that matter here. :func:`problems` returns one
line per broken rule, so a test can show that each rule catches a recipe that breaks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import dockerfile

# Packages that build code. The final stage has none of them: it only runs what was built.
BUILD_TOOLS = frozenset(
    {
        "build-essential",
        "clang",
        "cmake",
        "g++",
        "gcc",
        "libc6-dev",
        "make",
        "python3-dev",
        "cargo",
        "rustc",
    }
)
_HOST = re.compile(r"\b((?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d+)?)/", re.IGNORECASE)
_INSTALL = re.compile(
    r"\b(?:apt-get|apt|apk|dnf|yum|microdnf)\b[^&|;]*?\b(?:install|add)\b([^&|;]*)"
)


@dataclass
class Stage:
    """One ``FROM`` and the instructions under it."""

    image: str
    name: str | None
    commands: list[dockerfile.Command] = field(default_factory=list)


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """The recipe's global ``ARG`` defaults and its stages, base images with ARGs substituted."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for command in dockerfile.parse_string(text):
        if command.cmd == "ARG" and not stages:
            name, _, default = command.value[0].partition("=")
            args[name] = default
        elif command.cmd == "FROM":
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], command.value[0])
            name = command.value[2] if len(command.value) == 3 else None
            stages.append(Stage(image, name))
        elif stages:
            stages[-1].commands.append(command)
    return args, stages


def installed_packages(stage: Stage) -> set[str]:
    """Names a stage's ``RUN`` lines install with the system package manager."""
    names: set[str] = set()
    for command in stage.commands:
        if command.cmd == "RUN":
            for match in _INSTALL.finditer(" ".join(command.value)):
                names |= {word for word in match[1].split() if not word.startswith("-")}
    return names


def problems(text: str) -> list[str]:
    """Every rule the recipe ``text`` breaks; empty when it keeps them all."""
    _, stages = parse(text)
    if len(stages) < 2:
        return ["multi-stage: the recipe needs a build stage and a final stage"]
    final = stages[-1]
    found: list[str] = []
    base_hosts = {host for stage in stages for host in _HOST.findall(stage.image)}
    names = {stage.name for stage in stages if stage.name}
    for stage in stages:
        if stage.image not in names and stage.image != stages[0].image:
            found.append(f"one base: stage {stage.name or '(final)'} is FROM {stage.image}")
    for host in sorted(set(_HOST.findall(text)) - base_hosts):
        found.append(f"registries: {host} is not the base image's registry")
    tools = installed_packages(final) & BUILD_TOOLS
    if tools:
        found.append(f"final stage: installs build tools {sorted(tools)}")
    if not any(
        c.cmd == "COPY" and any(f.startswith("--from=") for f in c.flags) for c in final.commands
    ):
        found.append("final stage: copies nothing from the build stage")
    users = [c.value[0] for c in final.commands if c.cmd == "USER"]
    if not users or users[-1].partition(":")[0] in {"root", "0"}:
        found.append("final stage: its last USER must name a non-root user")
    elif not users[-1].partition(":")[0].isdigit():
        found.append("final stage: USER must be numeric, for runAsNonRoot to verify it")
    checks = [c for c in final.commands if c.cmd == "HEALTHCHECK"]
    if not checks or "/v1/health" not in " ".join(checks[-1].value):
        found.append("final stage: needs a HEALTHCHECK on /v1/health")
    return found
