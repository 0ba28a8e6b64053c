"""Post the markdown report as one pull-request comment, updated in place on re-runs.

Stdlib only (urllib.request): this runs in the trusted, write-token half of a
CI setup (docs/ci.md), which should install as little as possible. The comment
abdiff made earlier is recognised by its first line, `<!-- abdiff -->`, so a
re-run edits it instead of adding another comment to the PR.

Transient failures (429, 403 with a rate-limit answer, 5xx, connection errors)
are retried with exponential backoff under a total wait cap; anything else is
an InfrastructureError with one line naming the status and GitHub's message.

Only a comment written by the token's own account is ever edited (anyone can
write a comment that starts with the marker). The footer below the report is
built here from what the trusted job verified (the PR's head SHA, the URL of
the run that measured it), never from the artifact.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from types import MappingProxyType
from typing import Any

from abdiff import __version__
from abdiff.errors import InfrastructureError, InputError, one_line

MARKER = "<!-- abdiff -->"
DEFAULT_API_URL = "https://api.github.com"
MAX_BODY_CHARS = 65536  # GitHub's limit for a comment body
MAX_PAGES = 100  # 10,000 comments: beyond that something is wrong, not a long PR
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")  # plain http only for a local test server
WORKFLOWS_DIR = ".github/workflows/"
STALE_PREFIX = "> :warning: **Stale:**"
_SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_URL_SAFE_RE = re.compile(r"[A-Za-z0-9._~:/?#@!$&'*+,;=%-]+")  # no space, (), [], <>, quotes
_REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_NEXT_RE = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_HINTS = MappingProxyType({
    401: "check the token (GITHUB_TOKEN)",
    403: "the token lacks permission: it needs pull-requests: write",
    404: "no such repository or pull request, or the token cannot see it",
    422: "GitHub rejected the comment body",
})


@dataclass(frozen=True)
class CommentOutcome:
    """What upsert_comment did, or with dry_run what it would send."""

    action: str  # "created" | "updated" | "dry-run"
    method: str  # HTTP method used (or that would be used first: POST)
    request_url: str  # the API URL written to
    comment_id: int | None = None
    html_url: str | None = None  # the comment as seen in a browser
    body: str = ""


class _Transient(InfrastructureError):
    """A failure that may succeed when retried (rate limit, 5xx, network)."""

    def __init__(self, message: str, wait: float | None = None) -> None:
        super().__init__(message)
        self.wait = wait


def validate_target(repo: str, pr: int) -> tuple[str, str]:
    """OWNER/NAME and a positive PR number, or InputError (exit 2) before any network use."""
    if not isinstance(repo, str) or not _REPO_RE.match(repo) or repo.split("/")[1] in (".", ".."):
        raise InputError(f"--repo must be OWNER/NAME (e.g. NVIDIA/TensorRT-LLM), got {repo!r}")
    if not isinstance(pr, int) or isinstance(pr, bool) or pr <= 0:
        raise InputError(f"--pr must be a positive pull-request number, got {pr!r}")
    owner, name = repo.split("/")
    return owner, name


def with_marker(body: str) -> str:
    """The body, starting with the marker line so the next run finds this comment."""
    return body if body.startswith(MARKER) else f"{MARKER}\n{body}"


class GitHubClient:
    """A minimal GitHub REST client: JSON requests with retry and backoff.

    `sleep` is injectable so tests can run the retry paths without waiting;
    `max_wait` caps the total time spent waiting across all retries of one
    request (a rate limit that resets in an hour fails fast instead of
    holding a CI job).
    """

    def __init__(
        self,
        token: str,
        api_url: str = DEFAULT_API_URL,
        *,
        sleep: Callable[[float], None] = time.sleep,
        max_retries: int = 5,
        max_wait: float = 120.0,
        base_delay: float = 1.0,
        timeout: float = 30.0,
    ) -> None:
        parsed = urllib.parse.urlsplit(api_url)
        if not parsed.netloc or not (
                parsed.scheme == "https"
                or (parsed.scheme == "http" and parsed.hostname in LOOPBACK_HOSTS)):
            raise InputError(f"--api-url must be an https URL (plain http only to this "
                             f"machine), got {api_url!r}")
        self.token = token
        self.api_url = api_url.rstrip("/")
        self._origin = (parsed.scheme, parsed.netloc)
        self.sleep = sleep
        self.max_retries = max_retries
        self.max_wait = max_wait
        self.base_delay = base_delay
        self.timeout = timeout

    def url(self, path: str) -> str:
        return f"{self.api_url}{path}"

    def request(
        self, method: str, url: str, payload: dict[str, Any] | None = None,
        *, retry_server_errors: bool = True,
    ) -> tuple[Any, dict[str, str]]:
        """Send one request, retrying transient failures; returns (JSON, headers).

        `retry_server_errors=False` is for a non-idempotent POST: after a 5xx
        the comment may exist already, so the caller re-lists instead.
        """
        waited = 0.0
        for attempt in range(self.max_retries + 1):
            try:
                return self._send(method, url, payload)
            except _Transient as exc:
                if exc.wait is None and not retry_server_errors:
                    raise
                delay = exc.wait if exc.wait is not None else self.base_delay * 2**attempt
                if waited + delay > self.max_wait:
                    raise InfrastructureError(
                        f"{exc}; would wait {delay:.0f}s more, over the {self.max_wait:.0f}s cap"
                    ) from None
                if attempt == self.max_retries:
                    tries = attempt + 1
                    raise InfrastructureError(f"{exc} (gave up after {tries} tries)") from None
                self.sleep(delay)
                waited += delay
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, method: str, url: str, payload: dict[str, Any] | None) -> tuple[Any, dict]:
        parsed = urllib.parse.urlsplit(url)
        if (parsed.scheme, parsed.netloc) != self._origin:
            # Never send the token to a host other than the configured API.
            raise InfrastructureError(f"GitHub API: refusing to follow a link off {self.api_url}")
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/vnd.github+json")
        req.add_header("X-GitHub-Api-Version", "2022-11-28")
        req.add_header("User-Agent", f"abdiff/{__version__}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        # Unredirected: urllib must not carry the token along a redirect.
        req.add_unredirected_header("Authorization", f"Bearer {self.token}")
        where = f"GitHub API {method} {parsed.path}"
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                headers = dict(resp.headers.items())
        except urllib.error.HTTPError as err:
            raise self._http_error(where, err) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            reason = getattr(err, "reason", err)
            message = f"{where}: cannot reach {self.api_url} ({one_line(reason, 300)})"
            raise _Transient(message) from None
        try:
            return (json.loads(raw) if raw else None), headers
        except json.JSONDecodeError:
            raise InfrastructureError(f"{where}: answer is not JSON") from None

    def _http_error(self, where: str, err: urllib.error.HTTPError) -> InfrastructureError:
        """Classify an HTTP error: transient (with its wait, if GitHub gave one) or final."""
        try:
            message = str(json.loads(err.read() or b"{}").get("message") or "")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, OSError):
            message = ""
        text = f"{where}: {err.code} {err.reason}"
        if message:
            text += f": {one_line(message, 300)}"
        headers: Message | dict[str, str] = err.headers or {}
        wait = _retry_after(headers)
        rate_limited = err.code == 429 or (
            err.code == 403
            and (
                headers.get("X-RateLimit-Remaining") == "0"
                or wait is not None
                or "rate limit" in message.lower()  # secondary limits may omit the headers
            )
        )
        if rate_limited:
            if wait is None and headers.get("X-RateLimit-Reset", "").isdigit():
                wait = max(0.0, int(headers["X-RateLimit-Reset"]) - time.time())
            # Rate limits always carry a wait so they are retried even for a POST.
            return _Transient(f"{text} (rate limited)", wait if wait is not None else 60.0)
        if 500 <= err.code < 600:
            return _Transient(text)
        if err.code in _HINTS:
            text += f" ({_HINTS[err.code]})"
        return InfrastructureError(text)

    def paginate(self, url: str) -> Iterator[Any]:
        """Items of a list endpoint, following `Link: <...>; rel="next"` headers."""
        for _ in range(MAX_PAGES):
            items, headers = self.request("GET", url)
            if not isinstance(items, list):
                raise InfrastructureError(f"GitHub API GET {url}: expected a list")
            yield from items
            match = _NEXT_RE.search(_header(headers, "Link") or "")
            if not match:
                return
            url = match.group(1)
        raise InfrastructureError(f"GitHub API GET {url}: more than {MAX_PAGES} pages")

    def token_login(self) -> str:
        """The login of the account the token belongs to (GET /user).

        A GitHub Actions token cannot read /user: its account is
        `github-actions[bot]`, which the caller then names with --author.
        """
        try:
            answer, _ = self.request("GET", self.url("/user"))
        except InfrastructureError as exc:
            raise InfrastructureError(
                f"cannot tell which account the token belongs to ({exc}); pass --author LOGIN "
                "(github-actions[bot] for a workflow's token)") from None
        login = answer.get("login") if isinstance(answer, dict) else None
        if not isinstance(login, str) or not login:
            raise InfrastructureError("GitHub API GET /user: the answer has no login")
        return login

    def find_marker_comment(
        self, owner: str, name: str, pr: int, author: str
    ) -> dict[str, Any] | None:
        """The first issue comment on the PR by `author` whose body starts with the marker.

        Only that account's comments count: anyone can write a comment starting
        with the marker, and abdiff must not adopt it.
        """
        url = self.url(f"/repos/{owner}/{name}/issues/{pr}/comments?per_page=100")
        for comment in self.paginate(url):
            if not isinstance(comment, dict):
                continue
            if not str(comment.get("body") or "").startswith(MARKER):
                continue
            user = comment.get("user")
            if isinstance(user, dict) and user.get("login") == author:
                return comment
        return None

    def changed_files(self, owner: str, name: str, pr: int) -> list[str]:
        """The paths a pull request changes (GitHub lists at most 3,000)."""
        url = self.url(f"/repos/{owner}/{name}/pulls/{pr}/files?per_page=100")
        return [str(f.get("filename")) for f in self.paginate(url) if isinstance(f, dict)]


def _header(headers: dict[str, str], name: str) -> str | None:
    """Case-insensitive header lookup on a plain dict."""
    lowered = name.lower()
    return next((v for k, v in headers.items() if k.lower() == lowered), None)


def _retry_after(headers: Message | dict[str, str]) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), None when absent."""
    value = headers.get("Retry-After") if headers else None
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def check_head_sha(sha: str) -> str:
    """A full commit SHA (what the trusted job verified), or InputError."""
    if not _SHA_RE.fullmatch(sha or ""):
        raise InputError(f"--head-sha must be a full commit SHA (40 or 64 hex digits), got {sha!r}")
    return sha


# What GitHub turns into a ping, an image, a link or a reference, or what leaves a code span
# or a table cell: never part of a rev, a baseline or a suite name abdiff would write.
_RENDERED_RE = re.compile(r"@[A-Za-z0-9]|!\[|\]\(|://|www\.|[<>`|\\]|#[0-9]|GH-[0-9]",
                          re.IGNORECASE)
MAX_NAME_CHARS = 200
WORKTREE_SHA = "WORKTREE"  # revs.WORKTREE; not imported: this path loads the standard library only


def check_result_names(sides: dict[str, tuple[str, str, str | None]], names: dict[str, str],
                       where: str) -> None:
    """Refuse (InputError) a result whose SHAs, revs or names could render as anything but
    text: `sides` maps "a"/"b" to (sha, rev, baseline), `names` other fields to values.
    A SHA is 40 or 64 hex digits (or WORKTREE); a name has no control character (line
    break, tab), no @mention, image, link, issue reference, backtick or table bar."""
    fields = dict(names)
    for side, (sha, rev, baseline) in sides.items():
        if sha != WORKTREE_SHA and not _SHA_RE.fullmatch(sha):
            raise InputError(f"{where}: {side}.sha {sha[:80]!r} is not a commit SHA (40 or 64 "
                             "hex digits); not posted")
        fields[f"{side}.rev"] = rev
        if baseline is not None:
            fields[f"{side}.baseline"] = baseline
    for field_name, value in fields.items():
        bad = len(value) > MAX_NAME_CHARS or not value.isprintable() \
            or _RENDERED_RE.search(value)
        if bad:
            raise InputError(f"{where}: {field_name} {value[:80]!r} could render as a mention, "
                             "image, link or markup in the comment; not posted")


def check_run_url(url: str) -> str:
    """An https URL (http only to this machine) made of characters that cannot leave a
    Markdown link; InputError otherwise."""
    parsed = urllib.parse.urlsplit(url or "")
    secure = parsed.scheme == "https" or (parsed.scheme == "http"
                                          and parsed.hostname in LOOPBACK_HOSTS)
    if not secure or not parsed.netloc or not _URL_SAFE_RE.fullmatch(url):
        raise InputError(f"--run-url must be an https URL without spaces, brackets or quotes, "
                         f"got {url!r}")
    return url


def trusted_footer(head_sha: str, run_url: str, reported_sha: str | None,
                   changed: list[str] | None) -> str:
    """Lines below the report, from what the trusted job verified, not from the artifact.

    `reported_sha` is side B's SHA as the result names it; `changed` the PR's
    files (None: not looked up).
    """
    lines = ["", "---", f"Measured head `{head_sha}` (verified) in [this run]({run_url})."]
    if reported_sha is not None and reported_sha != head_sha:
        lines.append(f":warning: The result names side B `{reported_sha[:64]}`, not the "
                     "verified head: do not trust it.")
    touched = sorted(p for p in changed or [] if p.startswith(WORKFLOWS_DIR))
    if touched:
        lines.append(f":warning: This pull request changes {len(touched)} file(s) under "
                     f"`{WORKFLOWS_DIR}`: the run above used the pull request's own workflows, "
                     "which decide what was measured and reported. Review them first.")
    return "\n".join(lines) + "\n"


def stale_line(head_sha: str, run_url: str) -> str:
    return (f"{STALE_PREFIX} [the run]({run_url}) for head `{head_sha}` produced no result; "
            "the report below is of an earlier commit.")


def mark_stale(repo: str, pr: int, token: str, head_sha: str, run_url: str,
               api_url: str = DEFAULT_API_URL, *, author: str | None = None,
               sleep: Callable[[float], None] = time.sleep,
               max_wait: float = 120.0) -> CommentOutcome | None:
    """Say on the earlier abdiff comment that a newer run produced no result.

    The stale line goes right below the marker (replacing an older one); the
    report stays as it was. None when the PR has no abdiff comment.
    """
    owner, name = validate_target(repo, pr)
    line = stale_line(check_head_sha(head_sha), check_run_url(run_url))
    client = GitHubClient(token, api_url, sleep=sleep, max_wait=max_wait)
    existing = client.find_marker_comment(owner, name, pr, author or client.token_login())
    if existing is None:
        return None
    rest = str(existing.get("body") or "").split("\n")[1:]
    if rest and rest[0].startswith(STALE_PREFIX):
        rest = rest[1:]
    body = "\n".join([MARKER, line, *rest])
    return _patch(client, owner, name, existing, body[:MAX_BODY_CHARS])


def upsert_comment(
    repo: str, pr: int, body: str, token: str, api_url: str = DEFAULT_API_URL,
    dry_run: bool = False, *, sleep: Callable[[float], None] = time.sleep,
    max_wait: float = 120.0, author: str | None = None,
) -> CommentOutcome:
    """Create the abdiff comment on a PR, or update the one abdiff made before.

    Lists the PR's issue comments (all pages), PATCHes the first whose body
    starts with `<!-- abdiff -->` and was written by `author` (default: the
    token's own account), else POSTs a new one. `dry_run` validates
    and returns the POST it would send without touching the network (whether
    it would be an update is only known by listing).
    """
    owner, name = validate_target(repo, pr)
    body = with_marker(body)
    if len(body) > MAX_BODY_CHARS:
        raise InputError(f"comment body is {len(body)} characters; GitHub allows {MAX_BODY_CHARS}")
    if not dry_run and not token:
        raise InputError("no GitHub token: set GITHUB_TOKEN (or use --dry-run)")
    client = GitHubClient(token, api_url, sleep=sleep, max_wait=max_wait)
    create_url = client.url(f"/repos/{owner}/{name}/issues/{pr}/comments")
    if dry_run:
        return CommentOutcome("dry-run", "POST", create_url, body=body)
    author = author or client.token_login()
    payload = {"body": body}
    for attempt in range(2):
        existing = client.find_marker_comment(owner, name, pr, author)
        if existing is not None:
            return _patch(client, owner, name, existing, body)
        try:
            answer, _ = client.request("POST", create_url, payload, retry_server_errors=False)
        except _Transient as exc:
            # A 5xx on POST may still have created the comment: look again
            # (and update it if it is there) rather than post a duplicate.
            if attempt:
                raise InfrastructureError(str(exc)) from None
            sleep(client.base_delay)
            continue
        return _outcome("created", "POST", create_url, answer, body)
    raise AssertionError("unreachable")  # pragma: no cover


def _patch(client: GitHubClient, owner: str, name: str, existing: dict[str, Any],
           body: str) -> CommentOutcome:
    cid = existing.get("id")
    if not isinstance(cid, int) or isinstance(cid, bool):
        raise InfrastructureError("GitHub API: the abdiff comment has no numeric id")
    url = client.url(f"/repos/{owner}/{name}/issues/comments/{cid}")
    answer, _ = client.request("PATCH", url, {"body": body})
    return _outcome("updated", "PATCH", url, answer, body)


def _outcome(action: str, method: str, url: str, answer: Any, body: str) -> CommentOutcome:
    answer = answer if isinstance(answer, dict) else {}
    cid = answer.get("id")
    return CommentOutcome(
        action, method, url,
        comment_id=cid if isinstance(cid, int) else None,
        html_url=answer.get("html_url") if isinstance(answer.get("html_url"), str) else None,
        body=body,
    )
