"""exposure.py: which variables count as secrets, where abdiff's key lives, and the root note."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from abdiff.host.exposure import resume_key, secret_looking, secret_names, state_home, warn_if_root


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN",
                                  "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "CI_JOB_TOKEN", "HF_TOKEN",
                                  "npm_token", "AWS_SECRET_ACCESS_KEY", "AZURE_CLIENT_SECRET",
                                  "DB_PASSWORD", "CI_JOB_JWT_V2", "OPENAI_API_KEY", "GH_PAT",
                                  "DEPLOY_PRIVATE_KEY", "GOOGLE_APPLICATION_CREDENTIALS",
                                  "DOCKER_AUTH_CONFIG", "SLACK_WEBHOOK_URL", "SENTRY_DSN",
                                  "NPM_AUTH", "SESSION_COOKIE", "STRIPE_APIKEY",
                                  # names a review found missed
                                  "MYSQL_PWD", "DB_PASS", "DOCKERHUB_PASS", "STRIPE_KEY",
                                  "OPENAI_KEY", "WANDB_KEY", "NGC_KEY",
                                  "AZURE_STORAGE_CONNECTION_STRING"])
def test_secret_looking_names(name: str) -> None:
    assert secret_looking(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "TOKENIZERS_PARALLELISM", "HF_HOME",
                                  "CUDA_VISIBLE_DEVICES", "AWS_CA_BUNDLE", "PIP_CERT",
                                  "KEYBOARD", "SSL_CERT_FILE", "GIT_AUTHOR_NAME", "AUTHOR",
                                  "PIP_INDEX_URL", "GPG_KEY", "OLDPWD", "PWD",
                                  "BUILDKITE_STEP_KEY"])
def test_ordinary_names(name: str) -> None:
    assert not secret_looking(name)


def test_passed_and_empty_variables_are_not_counted() -> None:
    env = {"HF_TOKEN": "hf_x", "GH_TOKEN": "", "GITHUB_TOKEN": "ghs_x", "PATH": "/bin",
           "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "USE_AUTH_TOKEN": "False"}
    assert secret_names(env) == ["GITHUB_TOKEN", "HF_TOKEN"]
    assert secret_names(env, ["HF_TOKEN"]) == ["GITHUB_TOKEN"]


def test_credentials_are_seen_by_their_values_whatever_the_name() -> None:
    """Names the patterns miss (a reviewer's planted run read them from the CI shell's
    environ): a URL with a password, a private key, a token with a known prefix."""
    env = {"PIP_INDEX_URL": "https://ci:canary-pip@pypi.example/simple",
           "DEPLOY": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...",
           "NOTES": "ghp_" + "a1" * 18, "PUBLIC_INDEX": "https://pypi.org/simple",
           "MIRROR": "https://mirror.example/a@b", "PATH": "/bin"}
    assert secret_names(env) == ["DEPLOY", "NOTES", "PIP_INDEX_URL"]


def test_the_key_is_private_and_outside_the_cache(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABDIFF_STATE_DIR", str(tmp_path / "state"))
    key = resume_key()
    path = state_home() / "resume.key"
    assert len(key) == 32 and path.read_bytes() == key and resume_key() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(state_home().stat().st_mode) == 0o700
    path.chmod(0o644)  # readable by others: no longer a secret, replaced
    assert resume_key() != key and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_state_home_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ABDIFF_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert state_home() == tmp_path / "abdiff"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert state_home() == tmp_path / ".local" / "state" / "abdiff"


@pytest.mark.skipif(os.geteuid() != 0, reason="the note is for root")
def test_root_is_told_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("ABDIFF_STATE_DIR", str(tmp_path))
    with caplog.at_level(logging.INFO, logger="abdiff"):
        warn_if_root()
        assert "measuring as root" in caplog.text
        caplog.clear()
        warn_if_root()
        assert caplog.text == ""


def test_an_ancestor_holding_a_token_is_named(tmp_path: Path) -> None:
    """A shell that holds GITHUB_TOKEN and starts the measuring command without it (`env -u`):
    the token is still in the shell's /proc/PID/environ, and the refusal names that process."""
    check = "from abdiff.host.exposure import refuse_secrets; refuse_secrets([], False)"
    env = {**os.environ, "GITHUB_TOKEN": "ghs_x"}
    proc = subprocess.run(["bash", "-c", 'env -u GITHUB_TOKEN "$0" -c "$1"; exit $?',
                           sys.executable, check], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 1
    assert "GITHUB_TOKEN (in process " in proc.stderr and ", bash, above abdiff)" in proc.stderr


def test_credentials_a_review_found_missed_are_seen_by_their_values() -> None:
    env = {"REDIS_URL": "redis://:hunter2@cache:6379", "HOOK": "https://hooks.slack.com/"
           "services/T0/B0/xyz", "STORE": "DefaultEndpointsProtocol=https;AccountKey=abc==",
           "BILLING": "sk_live_" + "a" * 24, "LLM": "sk-proj-" + "b" * 30,
           "PLAIN_URL": "redis://cache:6379", "PATH": "/bin"}
    assert secret_names(env) == ["BILLING", "HOOK", "LLM", "REDIS_URL", "STORE"]
