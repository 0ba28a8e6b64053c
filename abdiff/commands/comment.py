"""`abdiff comment`: post (or update) the markdown report as a PR comment.

Separate from `abdiff A..B` on purpose: it runs in the trusted CI job that
holds a write token and never executes the pull request's code (docs/ci.md).
The token comes from GITHUB_TOKEN, never from the command line, where it
would show up in process listings and CI logs.

`--result FILE` is the form for untrusted input: the `abdiff.result/1` JSON is
validated and the comment is rendered here by abdiff's own markdown report,
which escapes everything from the benchmark, so a forged file can choose
what the report says but not how it is written (no raw HTML, pings or
links). `--body FILE` posts a file as it is, for input that is trusted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from abdiff.errors import InputError
from abdiff.files import read_text
from abdiff.github import DEFAULT_API_URL, upsert_comment


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "comment",
        help="post the markdown report as a pull-request comment (updated in place)",
        description="Create the abdiff comment on a GitHub pull request, or update the one "
        "abdiff posted before (found by its first line, <!-- abdiff -->). "
        "Reads the token from GITHUB_TOKEN.",
    )
    parser.add_argument("--repo", required=True, metavar="OWNER/NAME",
                        help="the repository, e.g. NVIDIA/TensorRT-LLM")
    parser.add_argument("--pr", required=True, type=int, metavar="N",
                        help="the pull-request number")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--result", type=Path, metavar="FILE",
                        help="the result JSON (--json FILE of abdiff A..B): validated and "
                        "rendered as the markdown report here; use this for untrusted input")
    source.add_argument("--body", type=Path, metavar="FILE",
                        help="the comment text as it is, e.g. the report of --format markdown "
                        "(trusted input only: it is posted unescaped)")
    parser.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL", DEFAULT_API_URL),
                        metavar="URL",
                        help="GitHub API root (default: $GITHUB_API_URL or %(default)s)")
    parser.add_argument("--author", metavar="LOGIN",
                        help="only adopt an earlier comment by this account, e.g. "
                        "github-actions[bot] (default: any comment starting with the marker)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be sent; no network, no token needed")
    parser.set_defaults(run=run)


def _read_body(path: Path) -> str:
    body = read_text(path, "comment body (--body)")
    if not body.strip():
        raise InputError(f"{path}: the comment body is empty")
    return body


def _render_result(path: Path) -> str:
    """The markdown report of a validated result file (InputError when it is not one)."""
    from abdiff.records import load_result
    from abdiff.reports import FORMATS

    return FORMATS["markdown"].render(load_result(path))


def run(args: argparse.Namespace) -> int:
    """Post or update the comment; 0 on success, errors raise (exit 2 or 3)."""
    body = _render_result(args.result) if args.result is not None else _read_body(args.body)
    token = os.environ.get("GITHUB_TOKEN", "").strip()
    if not token and not args.dry_run:
        raise InputError("GITHUB_TOKEN is not set (needed to post; --dry-run needs none)")
    outcome = upsert_comment(args.repo, args.pr, body, token, api_url=args.api_url,
                             dry_run=args.dry_run, author=args.author)
    if outcome.action == "dry-run":
        print(f"dry run: would {outcome.method} {outcome.request_url} "
              "(or PATCH the earlier abdiff comment if the PR has one)")
        print(outcome.body, end="" if outcome.body.endswith("\n") else "\n")
        return 0
    where = outcome.html_url or outcome.request_url
    print(f"{outcome.action} comment {outcome.comment_id}: {where}")
    sys.stdout.flush()
    return 0
