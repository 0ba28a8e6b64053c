"""`abdiff comment` against a real local HTTP server that behaves like GitHub's API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from abdiff import cli
from abdiff.errors import InfrastructureError, InputError
from abdiff.reports import markdown
from abdiff.reports.github import MARKER, STALE_PREFIX, GitHubClient, upsert_comment
from abdiff.store import records
from abdiff.verdict.policy import VERDICTS

TOKEN = "test-token-123"
REPO, PR = "octo/bench", 7
PAGE_SIZE = 2  # the fake pages after 2 comments, whatever per_page says


@dataclass
class FakeGitHub:
    """State of the fake API: comments of PR 7, scripted failures, a request log."""

    comments: list[dict[str, Any]] = field(default_factory=list)
    # (method, status, headers, message, also_apply): consumed by the next matching request.
    failures: list[tuple[str, int, dict[str, str], str, bool]] = field(default_factory=list)
    log: list[tuple[str, str]] = field(default_factory=list)
    next_id: int = 1000
    base: str = ""
    extra_link: str | None = None
    login: str = "github-actions[bot]"  # the token's own account (GET /user)
    files: list[str] = field(default_factory=lambda: ["bench/run.py"])  # what PR 7 changes

    def add(self, body: str, login: str = "github-actions[bot]") -> dict[str, Any]:
        self.next_id += 1
        comment = {"id": self.next_id, "body": body, "user": {"login": login},
                   "html_url": f"https://github.example/{REPO}/pull/{PR}#c{self.next_id}"}
        self.comments.append(comment)
        return comment


def _handler(state: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def _send(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(raw)

        def _handle(self, method: str) -> None:
            url = urllib.parse.urlsplit(self.path)
            state.log.append((method, self.path))
            length = int(self.headers.get("Content-Length") or 0)
            payload = json.loads(self.rfile.read(length)) if length else None
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._send(401, {"message": "Bad credentials"})
            apply_anyway = False
            if state.failures and state.failures[0][0] == method:
                _, status, headers, message, apply_anyway = state.failures.pop(0)
                if not apply_anyway:
                    return self._send(status, {"message": message}, headers)
            list_path = f"/repos/{REPO}/issues/{PR}/comments"
            if method == "GET" and url.path == "/user":
                return self._send(200, {"login": state.login})
            if method == "GET" and url.path == f"/repos/{REPO}/pulls/{PR}/files":
                return self._send(200, [{"filename": name} for name in state.files])
            if method == "GET" and url.path == list_path:
                page = int(urllib.parse.parse_qs(url.query).get("page", ["1"])[0])
                items = state.comments[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
                headers = {}
                if page * PAGE_SIZE < len(state.comments):
                    nxt = f"{state.base}{list_path}?per_page=100&page={page + 1}"
                    headers["Link"] = f'<{nxt}>; rel="next", <{nxt}>; rel="last"'
                elif state.extra_link:
                    headers["Link"] = f'<{state.extra_link}>; rel="next"'
                return self._send(200, items, headers)
            if method == "POST" and url.path == list_path:
                comment = state.add(payload["body"])
                if apply_anyway:  # created, but the answer is lost in a 5xx
                    return self._send(502, {"message": "Server Error"})
                return self._send(201, comment)
            prefix = f"/repos/{REPO}/issues/comments/"
            if method == "PATCH" and url.path.startswith(prefix):
                cid = int(url.path[len(prefix):])
                for comment in state.comments:
                    if comment["id"] == cid:
                        comment["body"] = payload["body"]
                        return self._send(200, comment)
            return self._send(404, {"message": "Not Found"})

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

    return Handler


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    state = FakeGitHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class Sleeps(list):
    """An injected sleep: records the waits instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _upsert(gh: FakeGitHub, body: str = f"{MARKER}\nreport v2\n", **kw: Any):
    kw.setdefault("sleep", Sleeps())
    kw.setdefault("token", TOKEN)
    kw.setdefault("author", "github-actions[bot]")  # the retry tests script the list request
    return upsert_comment(REPO, PR, body, api_url=gh.base, **kw)


def test_creates_when_no_marker_comment(github: FakeGitHub) -> None:
    for text in ("first", "LGTM", "<!-- other-bot -->\nhi"):
        github.add(text)
    outcome = _upsert(github, body="report without marker\n")
    assert outcome.action == "created" and outcome.method == "POST"
    assert outcome.comment_id == github.comments[-1]["id"]
    assert outcome.html_url and outcome.html_url.endswith(f"#c{outcome.comment_id}")
    assert github.comments[-1]["body"] == f"{MARKER}\nreport without marker\n"
    assert [m for m, _ in github.log] == ["GET", "GET", "POST"]  # both pages listed first


def test_updates_marker_comment_on_page_two(github: FakeGitHub) -> None:
    github.add("first")
    github.add("LGTM")
    marked = github.add(f"{MARKER}\nreport v1\n")
    github.add("a later human comment")
    before = [dict(c) for c in github.comments]
    outcome = _upsert(github)
    assert outcome.action == "updated" and outcome.method == "PATCH"
    assert outcome.comment_id == marked["id"]
    assert outcome.request_url.endswith(f"/issues/comments/{marked['id']}")
    assert marked["body"] == f"{MARKER}\nreport v2\n"
    others = [c for c in github.comments if c["id"] != marked["id"]]
    assert others == [c for c in before if c["id"] != marked["id"]]
    assert len(github.comments) == 4
    assert github.log[1][1].endswith("page=2")
    assert github.log[-1][0] == "PATCH"


def test_author_filter_ignores_marker_comments_by_others(github: FakeGitHub) -> None:
    impostor = github.add(f"{MARKER}\nfake report", login="mallory")
    mine = github.add(f"{MARKER}\nreport v1")
    outcome = _upsert(github, author="github-actions[bot]")
    assert outcome.action == "updated" and outcome.comment_id == mine["id"]
    assert impostor["body"] == f"{MARKER}\nfake report"


def test_a_strangers_marker_comment_is_never_edited(github: FakeGitHub) -> None:
    """A hostile comment holding the marker, by another account, listed first: without
    --author abdiff asks whose token it holds, and only ever edits that account's comment."""
    github.login = "abdiff-bot"
    impostor = github.add(f"{MARKER}\nfake report", login="mallory")
    outcome = _upsert(github, author=None)
    assert outcome.action == "created"
    assert impostor["body"] == f"{MARKER}\nfake report"
    assert ("PATCH", f"/repos/{REPO}/issues/comments/{impostor['id']}") not in github.log
    mine = github.comments[-1]
    mine["user"]["login"] = "abdiff-bot"
    assert _upsert(github, author=None).comment_id == mine["id"]
    assert github.log[0] == ("GET", "/user")


@pytest.mark.parametrize("url", ["http://api.github.example", "ftp://127.0.0.1", "file:///x",
                                 "http://127.0.0.1.evil.example"])
def test_only_https_or_loopback_api_urls(url: str) -> None:
    with pytest.raises(InputError, match="https URL"):
        GitHubClient(TOKEN, url)
    GitHubClient(TOKEN, "https://github.example/api/v3")
    GitHubClient(TOKEN, "http://localhost:8080")


def test_502_is_retried(github: FakeGitHub) -> None:
    github.failures.append(("GET", 502, {}, "Server Error", False))
    sleeps = Sleeps()
    outcome = _upsert(github, sleep=sleeps)
    assert outcome.action == "created"
    assert sleeps == [1.0]
    assert [m for m, _ in github.log] == ["GET", "GET", "POST"]


def test_429_retry_after_is_honoured(github: FakeGitHub) -> None:
    github.add(f"{MARKER}\nold")
    github.failures.append(("PATCH", 429, {"Retry-After": "0"}, "slow down", False))
    sleeps = Sleeps()
    outcome = _upsert(github, sleep=sleeps)
    assert outcome.action == "updated"
    assert sleeps == [0.0]
    assert github.comments[0]["body"].endswith("report v2\n")


def test_rate_limit_403_with_distant_reset_fails_fast(github: FakeGitHub) -> None:
    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "9999999999"}
    github.failures.append(("GET", 403, headers, "API rate limit exceeded", False))
    sleeps = Sleeps()
    with pytest.raises(InfrastructureError) as info:
        _upsert(github, sleep=sleeps)
    message = str(info.value)
    assert "403" in message and "rate limit" in message and "\n" not in message
    assert sleeps == []


def test_post_5xx_relists_instead_of_duplicating(github: FakeGitHub) -> None:
    github.add("first")
    github.failures.append(("POST", 502, {}, "", True))  # created, answer lost
    outcome = _upsert(github)
    assert outcome.action == "updated"
    assert sum(c["body"].startswith(MARKER) for c in github.comments) == 1
    assert [m for m, _ in github.log] == ["GET", "POST", "GET", "PATCH"]


def test_persistent_5xx_gives_up_with_one_line(github: FakeGitHub) -> None:
    github.failures += [("GET", 503, {}, "Service Unavailable", False)] * 10
    sleeps = Sleeps()
    with pytest.raises(InfrastructureError) as info:
        _upsert(github, sleep=sleeps)
    message = str(info.value)
    assert "503" in message and "gave up after 6 tries" in message and "\n" not in message
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0]


@pytest.mark.parametrize(
    ("status", "message"), [(404, "Not Found"), (422, "Validation Failed"), (403, "Forbidden")]
)
def test_client_errors_are_one_line(github: FakeGitHub, status: int, message: str) -> None:
    github.failures.append(("GET", status, {}, message, False))
    sleeps = Sleeps()
    with pytest.raises(InfrastructureError) as info:
        _upsert(github, sleep=sleeps)
    text = str(info.value)
    assert str(status) in text and message in text and "\n" not in text
    assert f"/repos/{REPO}/issues/{PR}/comments" in text
    assert sleeps == []


def test_bad_token_is_401_without_leaking_it(github: FakeGitHub) -> None:
    with pytest.raises(InfrastructureError) as info:
        _upsert(github, token="wrong-token")
    text = str(info.value)
    assert "401" in text and "Bad credentials" in text and "\n" not in text
    assert "wrong-token" not in text


def test_link_to_another_host_is_refused(github: FakeGitHub) -> None:
    github.add("only")
    github.extra_link = "https://attacker.example/steal"
    with pytest.raises(InfrastructureError, match="refusing to follow"):
        _upsert(github)


@pytest.mark.parametrize("repo", ["octo", "octo/bench/x", "-bad/x", "octo/..", "a b/c", ""])
def test_bad_repo_is_input_error(repo: str) -> None:
    with pytest.raises(InputError):
        upsert_comment(repo, PR, "x", TOKEN, dry_run=True)


@pytest.mark.parametrize("pr", [0, -3, True])
def test_bad_pr_is_input_error(pr: int) -> None:
    with pytest.raises(InputError):
        upsert_comment(REPO, pr, "x", TOKEN, dry_run=True)


def test_missing_token_and_oversized_body_are_input_errors() -> None:
    with pytest.raises(InputError, match="token"):
        upsert_comment(REPO, PR, "x", "", api_url="http://127.0.0.1:9")
    with pytest.raises(InputError, match="65536"):
        upsert_comment(REPO, PR, "x" * 70_000, TOKEN, dry_run=True)


def test_dry_run_touches_no_network() -> None:
    outcome = upsert_comment(REPO, PR, "hello", "", api_url="http://127.0.0.1:9", dry_run=True)
    assert outcome.action == "dry-run" and outcome.method == "POST"
    assert outcome.request_url == f"http://127.0.0.1:9/repos/{REPO}/issues/{PR}/comments"
    assert outcome.body == f"{MARKER}\nhello"


@pytest.fixture
def body_file(tmp_path: Path) -> Path:
    path = tmp_path / "report.md"
    path.write_text(f"{MARKER}\n**abdiff: no unintended change**\n", encoding="utf-8")
    return path


def dry_run(source: list[str], monkeypatch: pytest.MonkeyPatch, capsys) -> str:
    """`abdiff comment ... --dry-run` without a token: what it would send (exit 0)."""
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    code = cli.main(["comment", "--repo", REPO, "--pr", str(PR), *source,
                     "--api-url", "http://127.0.0.1:9", "--dry-run"])
    assert code == 0
    return capsys.readouterr().out


def test_cli_dry_run(body_file: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    out = dry_run(["--body", str(body_file)], monkeypatch, capsys)
    assert f"POST http://127.0.0.1:9/repos/{REPO}/issues/{PR}/comments" in out
    assert "**abdiff: no unintended change**" in out


def test_cli_missing_token_is_exit_2(body_file: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    code = cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--body", str(body_file)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == ("abdiff: error: GITHUB_TOKEN is not set (needed to post): export it "
                           "in the comment job, or pass --dry-run to print the comment instead")


@pytest.mark.parametrize(("repo", "pr"), [(REPO, "x"), (REPO, "0"), ("nope", str(PR))])
def test_cli_bad_arguments_are_exit_2(repo: str, pr: str, body_file: Path, capsys) -> None:
    argv = ["comment", "--repo", repo, "--pr", pr, "--body", str(body_file), "--dry-run"]
    assert cli.main(argv) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("code", ["-1", "256", "one"])
def test_an_exit_code_no_process_ends_with_is_exit_2(code: str, body_file: Path,
                                                     capsys) -> None:
    argv = ["comment", "--repo", REPO, "--pr", str(PR), "--body", str(body_file),
            "--exit-code", code, "--dry-run"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not an exit code (0 to 255)" in err, err


def test_cli_posts_to_server(github: FakeGitHub, body_file: Path,
                             monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    code = cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--body", str(body_file),
                     "--api-url", github.base])
    assert code == 0
    assert f"created comment {github.comments[0]['id']}" in capsys.readouterr().out
    monkeypatch.setenv("GITHUB_TOKEN", "wrong")
    assert cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--body", str(body_file),
                     "--api-url", github.base]) == 3
    assert "401" in capsys.readouterr().err


def _result_json(error_b: str = "<script>alert(1)</script> @octocat #12") -> dict[str, Any]:
    """A valid `abdiff.result/1` document whose B side failed with a hostile error line."""
    return records.Result(
        a=records.Side("main", "a" * 40),
        b=records.Side("pr", "b" * 40),
        expect={"backend": ["DSA"]},
        configs=[records.ConfigResult(
            id="GEN-TRTLLM-bs32", params={"backend": "TRTLLM"}, status_a="ok",
            status_b="aborted", status_change="broken", error_a=None, error_b=error_b,
            facts_changed={}, kernels_added={}, kernels_removed={},
            latency=records.LatencyResult("n/a", rounds_a=3, rounds_b=3),
            in_scope=False, verdict="unintended",
        )],
        summary={**dict.fromkeys(VERDICTS, 0), "unintended": 1, "configs": 1, "measured": 0,
                 "exit_code": 1},
        suite="mtp", target="reference",
    ).to_json()


@pytest.fixture
def result_file(tmp_path: Path) -> Path:
    path = tmp_path / "result.json"
    path.write_text(records.dump_json(_result_json()), encoding="utf-8")
    return path


def test_cli_result_renders_escaped_report(github: FakeGitHub, result_file: Path,
                                           monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    code = cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--result", str(result_file),
                     "--api-url", github.base])
    assert code == 0, capsys.readouterr().err
    body = github.comments[0]["body"]
    assert body.startswith(f"{MARKER}\n")
    assert body == markdown.render(records.load_result(result_file))
    assert "abdiff: 1 unintended change" in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>" not in body
    assert "@\u200doctocat" in body and "@octocat" not in body
    assert "#\u200d12" in body


def test_cli_result_dry_run(result_file: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    out = dry_run(["--result", str(result_file)], monkeypatch, capsys)
    assert f"\n{MARKER}\n" in out and "&lt;script&gt;" in out and "<script>" not in out


def _without(key: str) -> dict[str, Any]:
    data = _result_json()
    del data[key]
    return data


def _config_without(key: str) -> dict[str, Any]:
    data = _result_json()
    del data["configs"][0][key]
    return data


def _with_schema(schema: Any) -> dict[str, Any]:
    return {**_result_json(), "schema": schema}


def _with_error_b(value: Any) -> dict[str, Any]:
    data = _result_json()
    data["configs"][0]["error_b"] = value
    return data


@pytest.mark.parametrize(("data", "needle"), [
    (_with_schema("abdiff.run/1"), "schema"),
    (_with_schema(None), "schema"),
    (_without("configs"), "missing field 'configs'"),
    (_without("a"), "missing field 'a'"),
    (_config_without("latency"), "missing field 'latency'"),
    (_config_without("error_b"), "missing field 'error_b'"),
    (_with_error_b(["<b>"]), "configs[0].error_b must be str or null, got list"),
    ([1, 2], "JSON object"),
])
def test_cli_bad_result_is_exit_2(data: Any, needle: str, tmp_path: Path,
                                  github: FakeGitHub, monkeypatch: pytest.MonkeyPatch,
                                  capsys) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code = cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--result", str(path),
                     "--api-url", github.base])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert needle in err and str(path) in err
    assert github.log == []  # nothing was sent


@pytest.mark.parametrize("text", ["{", "[" * 100_000, '{"n": ' + "9" * 5000 + "}", ""])
def test_cli_unparseable_result_is_exit_2(text: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "result.json"
    path.write_text(text, encoding="utf-8")
    code = cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--result", str(path),
                     "--dry-run"])
    assert code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_cli_body_and_result_together_is_exit_2(body_file: Path, result_file: Path,
                                                capsys) -> None:
    argv = ["comment", "--repo", REPO, "--pr", str(PR), "--dry-run"]
    assert cli.main([*argv, "--body", str(body_file), "--result", str(result_file)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not allowed with" in err
    assert cli.main(argv) == 2  # one of them is required
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--body" in err and "--result" in err


# ---------------------------------------------------------------- the trusted footer, stale runs

HEAD = "c" * 40
RUN_URL = "https://github.example/octo/bench/actions/runs/42"


def _comment(github: FakeGitHub, *argv: str) -> int:
    return cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--api-url", github.base,
                     *argv])


def test_footer_names_the_verified_head_and_the_run(github: FakeGitHub, result_file: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys) -> None:
    """A forged artifact names its own B SHA; the footer shows the head the trusted job
    verified, links the run, says the two differ, and warns about changed workflows."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    github.files = ["bench/run.py", ".github/workflows/abdiff.yml"]
    assert _comment(github, "--result", str(result_file), "--head-sha", HEAD,
                    "--run-url", RUN_URL) == 0, capsys.readouterr().err
    body = github.comments[0]["body"]
    report, footer = body.split("\n---\n")
    assert report == markdown.render(records.load_result(result_file)).rstrip("\n") + "\n"
    assert f"Measured head `{HEAD}` (verified) in [this run]({RUN_URL})." in footer
    assert f"names side B `{'b' * 40}`, not the verified head" in footer
    assert "changes 1 file(s) under `.github/workflows/`" in footer
    github.files = ["bench/run.py"]
    data = _result_json()
    data["b"]["sha"] = HEAD
    result_file.write_text(records.dump_json(data), encoding="utf-8")
    assert _comment(github, "--result", str(result_file), "--head-sha", HEAD,
                    "--run-url", RUN_URL) == 0
    footer = github.comments[0]["body"].split("\n---\n")[1]
    assert ":warning:" not in footer and len(github.comments) == 1


@pytest.mark.parametrize(("sha", "url", "needle"), [
    ("c" * 39, RUN_URL, "--head-sha"),
    (HEAD, "http://github.example/run", "--run-url"),
    (HEAD, RUN_URL + ") [click](https://evil.example", "--run-url"),
    (HEAD, None, "go together"),
])
def test_bad_footer_values_are_exit_2(sha: str, url: str | None, needle: str, result_file: Path,
                                      capsys) -> None:
    argv = ["comment", "--repo", REPO, "--pr", str(PR), "--result", str(result_file),
            "--dry-run", "--head-sha", sha]
    assert cli.main(argv + (["--run-url", url] if url else [])) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_stale_marks_only_our_comment(github: FakeGitHub, monkeypatch: pytest.MonkeyPatch,
                                      capsys) -> None:
    """A newer run produced no result: the earlier report gets one stale line under the
    marker (replaced, not stacked, on the next one); a stranger's comment is left alone."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    impostor = github.add(f"{MARKER}\nfake", login="mallory")
    assert _comment(github, "--stale", "--head-sha", HEAD, "--run-url", RUN_URL) == 0
    assert "no earlier abdiff comment" in capsys.readouterr().out
    mine = github.add(f"{MARKER}\nreport of an older head\n")
    for run in (41, 42):
        url = f"https://github.example/octo/bench/actions/runs/{run}"
        assert _comment(github, "--stale", "--head-sha", HEAD, "--run-url", url) == 0
    lines = mine["body"].split("\n")
    assert lines[0] == MARKER and lines[1].startswith(STALE_PREFIX)
    assert f"runs/42) for head `{HEAD}` produced no result" in lines[1]
    assert lines[2:] == ["report of an older head", ""]
    assert impostor["body"] == f"{MARKER}\nfake"


# ---------------------------------------------------------------- forged artifacts


def test_forged_result_cannot_link_or_overflow(github: FakeGitHub, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Thousands of long notes with bare URLs, www. and GH-123 references: the comment stays
    under GitHub's limit (it is posted) and none of them becomes a link."""
    data = _result_json(error_b="see https://evil.example/x www.evil.example GH-123")
    data["notes"] = [f"note {i}: http://evil.example/{'x' * 380} gh-{i}" for i in range(1000)]
    path = tmp_path / "forged.json"
    path.write_text(records.dump_json(data), encoding="utf-8")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert _comment(github, "--result", str(path), "--head-sha", HEAD, "--run-url",
                    RUN_URL) == 0, capsys.readouterr().err
    body = github.comments[0]["body"]
    assert len(body) < 65536 and "more notes in the JSON result" in body
    report = body.split("\n---\n")[0]
    for raw in ("https://", "http://", "www.", "GH-123", "gh-1"):
        assert raw not in report


def test_oversized_result_is_not_read(tmp_path: Path, capsys) -> None:
    path = tmp_path / "huge.json"
    with open(path, "wb") as handle:
        handle.truncate(17 * 2**20)  # sparse: no disk used
    code = cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--result", str(path),
                     "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "larger than" in err and len(err.strip().splitlines()) == 1


BLOCKER = """
import sys

BLOCKED = {"numpy", "scipy", "yaml", "tabulate", "filelock", "torch", "pydantic", "tqdm",
           "jinja2", "markupsafe"}


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: abdiff comment must need the stdlib only")


sys.meta_path.insert(0, Blocker())
"""


def test_comment_needs_the_standard_library_only(github: FakeGitHub, result_file: Path,
                                                 tmp_path: Path) -> None:
    """`abdiff comment --result` in a fresh interpreter where numpy, scipy, yaml, tabulate,
    filelock, torch and pydantic cannot be imported: it renders and posts."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), GITHUB_TOKEN=TOKEN)
    probe = subprocess.run([sys.executable, "-c", "import yaml"], env=env, capture_output=True,
                           text=True, check=False)
    assert "blocked" in probe.stderr  # the blocker is in force
    proc = subprocess.run(
        [sys.executable, "-m", "abdiff.cli", "comment", "--repo", REPO, "--pr", str(PR),
         "--result", str(result_file), "--api-url", github.base, "--head-sha", HEAD,
         "--run-url", RUN_URL], env=env, capture_output=True, text=True, timeout=120,
        check=False)
    assert proc.returncode == 0, proc.stderr
    assert github.comments[0]["body"].startswith(f"{MARKER}\n")


# ---------------------------------------------------------------- ci/abdiff-ci.sh --post-only

CI_SCRIPT = Path(__file__).resolve().parents[1] / "ci" / "abdiff-ci.sh"


def _post_only(github: FakeGitHub, out: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABDIFF_")}
    env.update(ABDIFF_BIN=f"{sys.executable} -m abdiff.cli", ABDIFF_GH_REPO=REPO,
               ABDIFF_PR=str(PR), GITHUB_TOKEN=TOKEN, ABDIFF_API_URL=github.base,
               ABDIFF_VERIFIED_HEAD=HEAD, ABDIFF_RUN_URL=RUN_URL)
    return subprocess.run(["bash", str(CI_SCRIPT), "--post-only", "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_ci_script_posts_with_footer_then_marks_stale(github: FakeGitHub, result_file: Path,
                                                      tmp_path: Path) -> None:
    """The Jenkins path: post the result with the verified footer; a later build that left
    no result.json (or a symbolic link in its place) marks that comment stale, exit 3."""
    out = result_file.parent
    (out / "exit_code").write_text("1\n")  # what step 1 recorded (the result's own)
    proc = _post_only(github, out)
    assert proc.returncode == 0, proc.stderr
    assert f"Measured head `{HEAD}` (verified)" in github.comments[0]["body"]
    assert "the measurement failed" not in github.comments[0]["body"]
    result_file.unlink()
    result_file.symlink_to(tmp_path / "elsewhere.json")
    proc = _post_only(github, out)
    assert proc.returncode == 3 and "no " in proc.stderr
    assert github.comments[0]["body"].split("\n")[1].startswith(STALE_PREFIX)
    assert len(github.comments) == 1


# ---------------------------------------------------------------- names from the result file

@pytest.mark.parametrize(("where", "value"), [
    (("b", "sha"), "b" * 40 + "` @octocat ![x](https://evil.invalid/x.png) `"),
    (("b", "sha"), "B" * 40),
    (("a", "sha"), "a" * 39),
    (("b", "rev"), "pr @octocat"),
    (("b", "rev"), "pr![x](https://evil.invalid/x.png)"),
    (("a", "rev"), "main](https://evil.invalid)"),
    (("a", "baseline"), "nightly\n## Approved"),
    (("b", "rev"), "pr`x`"),
    (("suite", None), "mtp <img src=x>"),
], ids=lambda x: x if isinstance(x, str) and len(x) < 12 else None)
def test_a_result_whose_names_would_render_is_refused(
        github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,
        where: tuple[str, str | None], value: str) -> None:
    """A forged result naming its head `<sha>` @octocat ![img](url)`: nothing is posted,
    one line, exit 2, whether or not the trusted footer would quote it."""
    data = _result_json()
    side, key = where
    if key is None:
        data[side] = value
    else:
        data[side][key] = value
    path = tmp_path / "forged.json"
    path.write_text(records.dump_json(data), encoding="utf-8")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    code = cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--result", str(path),
                     "--api-url", github.base, "--head-sha", HEAD, "--run-url", RUN_URL])
    err = capsys.readouterr().err
    assert code == 2 and "not posted" in err and len(err.strip().splitlines()) == 1, err
    assert github.comments == [] and github.log == []


@pytest.mark.parametrize("rev", ["main", "origin/main", "HEAD~3", "v1.0^", "merge-base(main,pr)",
                                 "WORKTREE", "release/1.2-rc_3"])
def test_ordinary_revs_are_posted(github: FakeGitHub, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch, rev: str) -> None:
    data = _result_json()
    data["a"]["rev"] = rev
    path = tmp_path / "result.json"
    path.write_text(records.dump_json(data), encoding="utf-8")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert cli.main(["comment", "--repo", REPO, "--pr", str(PR), "--result", str(path),
                     "--api-url", github.base]) == 0
    assert len(github.comments) == 1
