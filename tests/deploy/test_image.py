"""docs/kubernetes/Dockerfile: it parses (BuildKit's parser), keeps the image rules, and builds
what the project ships. The image itself is not built here (that needs a container runtime)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from . import _image_rules

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "kubernetes" / "Dockerfile"
TEXT = RECIPE.read_text()


def test_the_recipe_keeps_every_rule() -> None:
    assert _image_rules.problems(TEXT) == []


def test_the_build_stage_compiles_the_spawner_and_the_final_stage_only_runs() -> None:
    _, (build, *_, final) = _image_rules.parse(TEXT)
    assert {"gcc", "libc6-dev"} <= _image_rules.installed_packages(build)
    assert _image_rules.installed_packages(final) == set()
    runs = " ".join(" ".join(c.value) for c in build.commands if c.cmd == "RUN")
    assert "pip install" in runs and "rg --version" in runs  # ripgrep's rg is in the environment
    (copy,) = [c for c in final.commands if c.cmd == "COPY"]
    assert copy.flags == ("--from=build",) and copy.value == ("/opt/opsbroker", "/opt/opsbroker")


def test_the_final_stage_serves_the_workspace_as_the_unprivileged_user() -> None:
    _, stages = _image_rules.parse(TEXT)
    final = {c.cmd: c.value for c in stages[-1].commands}
    assert final["USER"] == ("10001:10001",)  # the pod's runAsUser/runAsGroup
    assert final["WORKDIR"] == ("/workspace",)
    assert final["ENTRYPOINT"] == ("opsbroker",)
    assert final["CMD"][:3] == ("serve", "--root", "/workspace")
    assert "8080" in final["EXPOSE"] and "9090" in final["EXPOSE"]


def test_every_package_the_project_installs_is_copied_into_the_build() -> None:
    """A new top-level package in pyproject.toml that the recipe does not copy fails here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = project["tool"]["setuptools"]["packages"]["find"]
    _, (build, *_) = _image_rules.parse(TEXT)
    copied = {src for c in build.commands if c.cmd == "COPY" for src in c.value[:-1]}
    for where in find["where"]:
        for pattern in find["include"]:
            for package in (ROOT / where).glob(pattern.removesuffix("*")):
                if (package / "__init__.py").exists():
                    assert (package.name if where == "." else where) in copied, package
    assert {"pyproject.toml", "README.md"} <= copied
    assert all((ROOT / src).exists() for src in copied)


def test_the_context_leaves_out_local_builds() -> None:
    ignored = (RECIPE.parent / "Dockerfile.dockerignore").read_text().split()
    assert {"**/*.so", ".venv", "**/__pycache__"} <= set(ignored)


BROKEN = [
    ("single stage", TEXT.split("FROM ${PYTHON_IMAGE}\n")[0], "multi-stage"),
    ("root", TEXT.replace("USER 10001:10001", "USER root"), "non-root"),
    ("no user", TEXT.replace("USER 10001:10001\n", ""), "non-root"),
    ("user by name", TEXT.replace("USER 10001:10001", "USER opsbroker"), "numeric"),
    ("no healthcheck", TEXT.replace("HEALTHCHECK", "# HEALTHCHECK"), "HEALTHCHECK"),
    (
        "compiler in the final stage",
        TEXT.replace("RUN groupadd", "RUN apt-get install -y make && groupadd"),
        "build tools ['make']",
    ),
    (
        "another registry",
        TEXT.replace(
            "pip install --no-cache-dir", "pip install --index-url https://pypi.example.org/simple"
        ),
        "pypi.example.org",
    ),
    (
        "another base",
        TEXT.replace("FROM ${PYTHON_IMAGE}\n", "FROM quay.io/other/python:3.11\n"),
        "one base",
    ),
    ("nothing copied", TEXT.replace("COPY --from=build", "COPY"), "copies nothing"),
]


@pytest.mark.parametrize(("name", "text", "complaint"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_recipe_that_breaks_a_rule_is_caught(name: str, text: str, complaint: str) -> None:
    assert text != TEXT, name
    assert any(complaint in problem for problem in _image_rules.problems(text))
