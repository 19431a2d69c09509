"""The policy model: loading, validation messages, glob rules, checks and the command environment."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operations import (
    CommandEnvCache,
    InvalidArgument,
    Policy,
    PolicyDenied,
    PolicyEnforcer,
    PolicyError,
    build_command_env,
    glob_matches,
    load_policy,
)
from operations._policy import DEFAULT_DENY_READ, _DenyList


def test_defaults_are_safe() -> None:
    policy = Policy()
    enforcer = PolicyEnforcer(policy)
    for secret in (".env", "app/.env", "certs/server.pem", "home/.ssh/id_rsa", "id_ed25519.pub"):
        with pytest.raises(PolicyDenied):
            enforcer.check_read("read_file", secret)
    for hook in (".git/hooks/pre-commit", "sub/.git/hooks/post-merge", ".bashrc", ".git/config"):
        with pytest.raises(PolicyDenied):
            enforcer.check_write("write_file", hook)
    enforcer.check_read("read_file", "src/main.py")
    enforcer.check_write("write_file", "src/main.py")
    enforcer.check_read("read_file", ".git/hooks/pre-commit")  # reading a hook is harmless
    assert policy.exec.default_timeout <= policy.exec.max_timeout
    assert policy.sandbox.mode == "none"
    assert policy.audit.fail_closed


def test_load_from_toml(tmp_path: Path) -> None:
    file = tmp_path / "policy.toml"
    file.write_text(
        'root = "/srv/ws"\nread_only = true\ndeny_read = ["secrets"]\n'
        "[exec]\nenabled = false\nmax_timeout = 30\ndefault_timeout = 10\n"
        '[env]\ninherit = ["PATH"]\nset = { CI = "1" }\n'
        '[sandbox]\nmode = "landlock"\n'
        "[audit]\nfail_closed = false\n"
    )
    policy = load_policy(file)
    assert policy.root == "/srv/ws"
    assert policy.read_only
    assert policy.deny_read == [*DEFAULT_DENY_READ, "secrets"]
    assert not policy.exec.enabled
    assert policy.exec.max_timeout == 30
    assert policy.env.set == {"CI": "1"}
    assert policy.sandbox.mode == "landlock"
    assert not policy.audit.fail_closed
    assert load_policy(None) == Policy()


def test_invalid_policy_names_every_key(tmp_path: Path) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(
        'deny_read = ["/etc/passwd"]\nmax_read_bytes = -1\nread_olny = true\n'
        '[sandbox]\nmode = "jail"\nread = ["usr"]\n'
    )
    with pytest.raises(PolicyError) as info:
        load_policy(file)
    lines = str(info.value).splitlines()
    assert "bad.toml" in lines[0]
    text = "\n".join(lines[1:])
    assert "deny_read: '/etc/passwd' is not a root-relative glob" in text
    assert "max_read_bytes: Input should be greater than 0" in text
    assert "read_olny: unknown key" in text
    assert "sandbox.mode:" in text
    assert "sandbox.read: 'usr' must be an absolute path" in text
    assert len(lines) == 6
    with pytest.raises(PolicyError, match="deny_write: error parsing glob '\\[abc'"):
        Policy.from_mapping({"deny_write": ["[abc"]})


def test_a_deny_list_extends_the_built_in_globs_unless_told_to_replace_them() -> None:
    """``deny_read = ["secrets/**"]`` used to drop the secret globs: ``.env`` became readable."""
    extended = PolicyEnforcer(Policy.from_mapping({"deny_read": ["secrets/**"]}))
    for path in (".env", "app/.env", "secrets/a"):
        with pytest.raises(PolicyDenied):
            extended.check_read("read_file", path)
    extended.check_read("read_file", "src/main.py")
    with pytest.raises(PolicyDenied):
        PolicyEnforcer(Policy.from_mapping({"deny_write": ["build"]})).check_write(
            "write_file", ".git/hooks/pre-commit"
        )
    replaced = PolicyEnforcer(
        Policy.from_mapping({"deny_read": ["secrets/**"], "replace_default_deny_read": True})
    )
    replaced.check_read("read_file", ".env")
    with pytest.raises(PolicyDenied):
        replaced.check_read("read_file", "secrets/a")


def test_an_unset_default_timeout_follows_a_lower_max_down() -> None:
    """Setting only ``[exec] max_timeout = 60`` used to fail: the default stayed 120."""
    policy = Policy.from_mapping({"exec": {"max_timeout": 60}})
    assert policy.exec.default_timeout == 60
    assert Policy.from_mapping({"exec": {"max_timeout": 900}}).exec.default_timeout == 120


def test_default_timeout_above_max_is_invalid() -> None:
    with pytest.raises(PolicyError, match=r"exec: default_timeout \(700 s\) is above max_timeout"):
        Policy.from_mapping({"exec": {"default_timeout": 700, "max_timeout": 600}})


def test_unreadable_and_non_toml_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("deny_read = [")
    with pytest.raises(PolicyError, match="is not valid TOML"):
        load_policy(bad)


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("**/*.pem", "a.pem", True),
        ("**/*.pem", "x/y/.hidden.pem", True),
        ("**/*.pem", "a.pem.txt", False),
        ("*.pem", "x/a.pem", True),  # no "/": a name at any depth
        ("/*.pem", "x/a.pem", False),  # a leading "/" anchors to the root
        ("{.env,.envrc}", "app/.envrc", True),
        ("secrets", "secrets/a/b", True),
        ("secrets", "secretsx", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b/c", True),
        ("a/**", "a/x", True),
        ("a/**", "a", True),
        ("id_rsa*", "id_rsa.pub", True),
        ("?.txt", "ab.txt", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "b.txt", False),
        (".git/hooks", ".git/hooks/pre-commit", True),
        ("**", "anything/at/all", True),
    ],
)
def test_glob_rules(pattern: str, path: str, expected: bool) -> None:
    assert glob_matches(pattern, path) is expected


def test_denials_name_the_rule() -> None:
    enforcer = PolicyEnforcer(Policy(deny_read=["**/*.pem"], read_only=True))
    with pytest.raises(PolicyDenied) as info:
        enforcer.check_read("read_file", "k/server.pem")
    assert info.value.rule == "deny_read: **/*.pem"
    assert "deny_read: **/*.pem" in str(info.value)
    with pytest.raises(PolicyDenied) as info:
        enforcer.check_write("write_file", "src/a.py")
    assert info.value.rule == "read_only"
    assert enforcer.read_denied("x.pem")
    enforcer.check_read("ls", "")  # the root itself is never a glob match


def test_exec_checks() -> None:
    enforcer = PolicyEnforcer(Policy())
    assert enforcer.check_exec("exec", "src", "bash", None) == 120.0
    assert enforcer.check_exec("exec", "src", "bash", 5) == 5
    with pytest.raises(PolicyDenied) as info:
        enforcer.check_exec("exec", "src", "bash", 601)
    assert info.value.rule == "exec.max_timeout: 600"
    assert "ask for at most 600 s" in str(info.value)
    with pytest.raises(PolicyDenied, match=r"exec\.shells"):
        enforcer.check_exec("exec", "src", "powershell", None)
    for bad in (0, -1, math.nan):  # not a timeout at all: the one rule of check_timeout
        with pytest.raises(InvalidArgument) as bad_info:
            enforcer.check_exec("exec", "src", "bash", bad)
        assert bad_info.value.reason == "Invalid timeout: must be a finite number of seconds"
    off = PolicyEnforcer(Policy.from_mapping({"exec": {"enabled": False}}))
    with pytest.raises(PolicyDenied) as info:
        off.check_exec("exec", "", "bash", None)
    assert info.value.rule == "exec.enabled: false"


def test_command_env_leaks_nothing_but_the_allowlist() -> None:
    policy = Policy.from_mapping(
        {"env": {"inherit": ["PATH", "LC_*"], "set": {"CI": "1", "PATH": "/usr/bin"}}}
    )
    parent = {
        "PATH": "/bin",
        "LC_ALL": "C",
        "OPSBROKER_TOKEN": "s3cret",
        "AWS_SECRET_ACCESS_KEY": "x",
    }
    env = build_command_env(policy, parent, {"FOO": "bar"})
    assert env == {"PATH": "/usr/bin", "LC_ALL": "C", "CI": "1", "FOO": "bar"}
    assert build_command_env(Policy(), {"GITHUB_TOKEN": "t", "HOME": "/h"}) == {"HOME": "/h"}


def test_command_env_cache_follows_the_environment_and_the_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cache gives what build_command_env gives, even after the environment changes."""
    policy = Policy.from_mapping({"env": {"inherit": ["PATH", "LC_*"], "set": {"CI": "1"}}})
    cache = CommandEnvCache()
    monkeypatch.setenv("LC_ALL", "C")
    for _ in range(2):
        assert cache.build(policy) == build_command_env(policy, os.environ)
    monkeypatch.setenv("LC_ALL", "fr_FR.UTF-8")
    monkeypatch.setenv("LC_TIME", "C")
    assert cache.build(policy, {"FOO": "bar"}) == build_command_env(
        policy, os.environ, {"FOO": "bar"}
    )
    assert cache.build(policy)["LC_TIME"] == "C" and "FOO" not in cache.build(policy)
    monkeypatch.delenv("LC_ALL")
    assert "LC_ALL" not in cache.build(policy)
    other = Policy.from_mapping({"env": {"inherit": ["LC_TIME"]}})
    assert cache.build(other) == {"LC_TIME": "C"}
    parent = {"PATH": "/bin", "LC_X": "1", "SECRET": "s"}
    given = CommandEnvCache(parent)
    assert given.build(policy) == {"PATH": "/bin", "LC_X": "1", "CI": "1"}
    parent["LC_Y"] = "2"
    assert given.build(policy)["LC_Y"] == "2"


SEGMENTS = ["a", "b", ".env", "x.pem", ".git", "hooks", "id_rsa.pub", "src", "c.py", ".ssh"]
PATTERNS = [
    "**/.env",
    "*.pem",
    "/a/*.py",
    "**/.git/hooks",
    "id_rsa*",
    "a/**",
    "src/**/c.py",
    "{b,.ssh}",
    "[ab]/x.pem",
    "**",
    "a/b",
    "?.py",
]


@settings(max_examples=300, deadline=None)
@given(
    patterns=st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=4, unique=True),
    parts=st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=5),
)
def test_the_one_pass_deny_list_agrees_with_each_glob(
    patterns: list[str], parts: list[str]
) -> None:
    """The combined regex is only a fast path: it must never miss what a single glob matches."""
    path = "/".join(parts)
    expected = next((p for p in patterns if glob_matches(p, path)), None)
    got = _DenyList("deny_read", patterns).match(path)
    assert got == (None if expected is None else f"deny_read: {expected}")
