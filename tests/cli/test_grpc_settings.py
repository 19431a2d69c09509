"""grpc core's settings for the ``opsbroker`` commands (:mod:`opsbroker.grpccore`): set before grpc
is imported, on the grpcio versions they were measured on, never over the operator's own, and
named so that the installed grpc knows them."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

import pytest
from opsbroker import grpccore

from ._run import COMMAND_TIMEOUT_S, REPO, cli_env

MEASURED = metadata.version("grpcio").startswith(grpccore.MEASURED_ON)

PRINT_SETTINGS = (
    "import os, sys, opsbroker.cli\n"
    "assert 'grpc' in sys.modules\n"
    "print(repr(os.environ.get('GRPC_EXPERIMENTS')), os.environ.get('GRPC_VERBOSITY'))\n"
)


def _python(code: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter with ``env`` over the CLI's environment (``None``: unset)."""
    environment = cli_env()
    for name, value in env.items():
        environment.pop(name, None)
        if value is not None:
            environment[name] = value
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment,
        cwd=REPO, timeout=COMMAND_TIMEOUT_S, check=False,
    )  # fmt: skip


def test_the_commands_set_grpc_s_variables_before_grpc_is_imported() -> None:
    done = _python(PRINT_SETTINGS, GRPC_EXPERIMENTS=None, GRPC_VERBOSITY=None)
    assert done.returncode == 0, done.stderr
    experiments = repr(grpccore.EXPERIMENTS) if MEASURED else "None"
    assert done.stdout.split() == [experiments, "ERROR"]


def test_an_operator_s_own_settings_are_kept() -> None:
    done = _python(PRINT_SETTINGS, GRPC_EXPERIMENTS="", GRPC_VERBOSITY="INFO")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["''", "INFO"]


def test_the_installed_grpc_knows_every_experiment_named() -> None:
    """grpc logs an unknown experiment as an error at every start; the settings only apply on the
    versions measured (:data:`~opsbroker.grpccore.MEASURED_ON`), which must know them."""
    done = _python("import grpc", GRPC_EXPERIMENTS=grpccore.EXPERIMENTS, GRPC_VERBOSITY="INFO")
    assert done.returncode == 0, done.stderr
    if MEASURED:
        assert "experiment" not in done.stderr.lower(), done.stderr
    bogus = _python("import grpc", GRPC_EXPERIMENTS="-no_such_experiment", GRPC_VERBOSITY="INFO")
    assert "Unknown experiment: no_such_experiment" in bogus.stderr  # what the check looks for


def test_nothing_is_set_once_grpc_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    import grpc  # noqa: F401  (imported by now in any case: the settings come too late)

    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    monkeypatch.delenv("GRPC_VERBOSITY", raising=False)
    assert grpccore.configure() is False
    assert "GRPC_EXPERIMENTS" not in os.environ
