"""`abdiff comment`: post (or update) the markdown report as a PR comment.

Separate from `abdiff A..B` on purpose: it runs in the trusted CI job that
holds a write token and never executes the pull request's code (docs/ci.md).
The token comes from GITHUB_TOKEN, never from the command line, where it
would show up in process listings and CI logs.

`--result FILE` is the form for untrusted input: the `abdiff.result/1` JSON is
size-capped, validated and rendered here by abdiff's own markdown report,
which escapes everything from the benchmark, so a forged file can choose
what the report says but not how it is written (no raw HTML, pings or
links). `--body FILE` posts a file as it is, for input that is trusted.
`--head-sha` and `--run-url` (what the trusted job verified) add a footer;
`--stale` marks the earlier comment when a newer run produced no result.

This path imports the standard library only (records, reports.markdown,
github): the job holding the write token installs abdiff with `--no-deps`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from abdiff.errors import InputError
from abdiff.reports.github import (
    DEFAULT_API_URL,
    MARKER,
    GitHubClient,
    check_head_sha,
    check_result_names,
    check_run_url,
    mark_stale,
    trusted_footer,
    upsert_comment,
    validate_target,
)
from abdiff.reports.printable import printable
from abdiff.store.files import read_text

if TYPE_CHECKING:  # imported when rendering, like the rest of that path
    from abdiff.store.records import Result

# A real result of a thousand configs is about 2 MB; a forged artifact may be anything.
MAX_RESULT_BYTES = 16 * 2**20


def exit_status(text: str) -> int:
    """A process's exit status as a shell reports it: 0 to 255."""
    if not text.isdigit() or int(text) > 255:
        raise argparse.ArgumentTypeError(f"{text!r} is not an exit code (0 to 255)")
    return int(text)


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
    source.add_argument("--stale", action="store_true",
                        help="mark the earlier abdiff comment stale: the run of --run-url "
                        "for --head-sha produced no result")
    parser.add_argument("--head-sha", metavar="SHA",
                        help="the PR head the trusted job verified was measured (footer)")
    parser.add_argument("--run-url", metavar="URL",
                        help="the run that measured it (footer); goes with --head-sha")
    parser.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL", DEFAULT_API_URL),
                        metavar="URL",
                        help="GitHub API root (default: $GITHUB_API_URL or %(default)s)")
    parser.add_argument("--author", metavar="LOGIN",
                        help="the account whose earlier comment is updated, e.g. "
                        "github-actions[bot] (default: the token's own account)")
    parser.add_argument("--exit-code", type=exit_status, metavar="N",
                        help="the measuring step's exit code, as the trusted job recorded it: "
                        "with --result, a report is posted only for 0 or 1 and a result that "
                        "says the same; otherwise the comment says the measurement failed")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be sent; no network, no token needed")
    parser.set_defaults(run=run)


def _read_body(path: Path) -> str:
    body = read_text(path, "comment body (--body)")
    if not body.strip():
        raise InputError(f"{path}: the comment body is empty")
    return body


def _load_result(path: Path) -> Result:
    """The validated result file; too large, unreadable or invalid is an InputError."""
    from abdiff.store.records import load_result

    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (--result)") from None
    if size > MAX_RESULT_BYTES:
        raise InputError(f"{path}: {size} bytes, larger than the {MAX_RESULT_BYTES} a result "
                         "file may be; not read")
    result = load_result(path)
    # the footer and the report's heading name these: a forged file must not ping or link
    check_result_names({side.lower(): (s.sha, s.rev, s.baseline)
                        for side, s in (("A", result.a), ("B", result.b))},
                       {"suite": result.suite, "target": result.target}, str(path))
    return result


def measurement_failed(result: Result, measured_exit: int | None) -> str | None:
    """Why `result` must not be posted as a report, None when it may: the measuring step
    did not exit 0 or 1 (a result there is not what it measured: its benchmark could have
    written it), exited otherwise than the result says, or the result's summary disagrees
    with its own configs (forged or damaged)."""
    from abdiff.reports.common import exit_code
    from abdiff.verdict.policy import summary_disagreements

    said = exit_code(result)
    if measured_exit is not None and measured_exit not in (0, 1):
        return f"the measuring step exited with code {measured_exit}"
    if measured_exit is not None and measured_exit != said:
        return (f"the measuring step exited with code {measured_exit}, its result file says "
                f"{said}")
    wrong = summary_disagreements(result.summary, result.configs)
    if wrong:
        return "its result file disagrees with itself: " + "; ".join(wrong[:3])
    return None


def failed_body(why: str) -> str:
    """The comment for a run whose result is not posted: what is true, and no verdict
    (`why` may quote the forged file: escaped as every report field is)."""
    from abdiff.reports.markdown import escape

    return (f"{MARKER}\n:warning: **abdiff: the measurement failed** ({escape(why, 400)}); no "
            "verdict for this run. The CI job's log says what went wrong.\n")


def _footer(args: argparse.Namespace, token: str, reported_sha: str | None) -> str:
    """The trusted footer, or "" without --head-sha; the PR's files are looked up when posting."""
    if args.head_sha is None:
        return ""
    changed = None
    if not args.dry_run:
        owner, name = validate_target(args.repo, args.pr)
        changed = GitHubClient(token, args.api_url).changed_files(owner, name, args.pr)
    return trusted_footer(args.head_sha, args.run_url, reported_sha, changed)


def run(args: argparse.Namespace) -> int:
    """Post or update the comment; 0 on success, errors raise (exit 2 or 3)."""
    if (args.head_sha is None) != (args.run_url is None):
        raise InputError("--head-sha and --run-url go together (the footer names both)")
    if args.head_sha is not None:
        check_head_sha(args.head_sha)
        check_run_url(args.run_url)
    elif args.stale:
        raise InputError("--stale needs --head-sha and --run-url (the run that left no result)")
    token = os.environ.get("GITHUB_TOKEN", "").strip()
    if not token and not args.dry_run:
        raise InputError("GITHUB_TOKEN is not set (needed to post): export it in the "
                         "comment job, or pass --dry-run to print the comment instead")
    if args.stale:
        return _mark_stale(args, token)
    if args.result is not None:
        from abdiff.reports import markdown

        result = _load_result(args.result)
        failed = measurement_failed(result, args.exit_code)
        body = (failed_body(failed) if failed else markdown.render(result)) \
            + _footer(args, token, result.b.sha)
    else:
        body = _read_body(args.body) + _footer(args, token, None)
    body = printable(body)  # what the benchmark may have written reaches no log raw
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


def _mark_stale(args: argparse.Namespace, token: str) -> int:
    if args.dry_run:
        validate_target(args.repo, args.pr)
        print(f"dry run: would mark the abdiff comment on {args.repo}#{args.pr} stale")
        return 0
    outcome = mark_stale(args.repo, args.pr, token, args.head_sha, args.run_url,
                         api_url=args.api_url, author=args.author)
    if outcome is None:
        print("no earlier abdiff comment to mark stale")
    else:
        where = outcome.html_url or outcome.request_url
        print(f"marked comment {outcome.comment_id} stale: {where}")
    return 0
