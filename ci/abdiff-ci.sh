#!/usr/bin/env bash
# abdiff-ci.sh: run abdiff for one pull request from any CI system (Jenkins,
# GitLab, Buildkite, ...), e.g. a job triggered by a "/bot run" comment.
#
# It compares BASE..HEAD on a suite, writes the markdown report and the result
# JSON to an output folder, keeps abdiff's exit code, and can post the report
# as a PR comment (ABDIFF_POST_COMMENT=1) or only post an existing result
# (--post-only). The comment is always rendered by `abdiff comment --result`
# from the validated result JSON, never taken from report.md, which the run
# step (pull-request code) could have rewritten. Why running and posting should be separate steps with
# separate credentials: docs/ci.md.
#
# Exit codes: 0 no unintended change; 1 unintended change; 2 bad input or
# usage; 3 abdiff (or posting the comment) could not run.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: abdiff-ci.sh [--base REV] [--head REV] [--suite NAME] [--out DIR] [--repo PATH]
                    [--merge-base] [--post-only] [-- EXTRA_ABDIFF_ARGS...]

Options (each has an environment variable; the option wins):
  --base REV     ABDIFF_BASE    side A, e.g. origin/main or a SHA (required unless --post-only)
  --head REV     ABDIFF_HEAD    side B, e.g. the PR head SHA (required unless --post-only)
  --suite NAME   ABDIFF_SUITE   config suite (default: mtp)
  --out DIR      ABDIFF_OUT     output folder (default: abdiff-out)
  --repo PATH    ABDIFF_REPO    the benchmark's git checkout (default: .)
  --merge-base                  compare against the merge base of BASE and HEAD (BASE...HEAD)
  --post-only                   do not run anything; post the report of DIR/result.json
  -- ARGS                       passed to abdiff unchanged, e.g. -- --rounds 6 --expect backend=DSA

Posting (ABDIFF_POST_COMMENT=1, or --post-only):
  ABDIFF_GH_REPO=OWNER/NAME  ABDIFF_PR=N  GITHUB_TOKEN=...  [ABDIFF_API_URL=URL]
  [ABDIFF_COMMENT_AUTHOR=LOGIN]  (the account whose comment is updated; default: the token's)
  [ABDIFF_VERIFIED_HEAD=SHA ABDIFF_RUN_URL=URL]  (footer: the head you verified was measured,
                                 and this build; with no result, the earlier comment is marked stale)
Other: ABDIFF_BIN (the abdiff command, default: abdiff)
       ABDIFF_CACHE_DIR (default: a fresh folder for this job, removed at the end)
EOF
}

die() {  # usage error: one line, exit 2 (the abdiff convention)
  echo "abdiff-ci: error: $*" >&2
  exit 2
}

base="${ABDIFF_BASE:-}"
head="${ABDIFF_HEAD:-}"
suite="${ABDIFF_SUITE:-mtp}"
out="${ABDIFF_OUT:-abdiff-out}"
repo="${ABDIFF_REPO:-.}"
post="${ABDIFF_POST_COMMENT:-0}"
range_op=".."
mode="run"
extra=()

while (($# > 0)); do
  case "$1" in
    --base | --head | --suite | --out | --repo)
      (($# >= 2)) || die "$1 needs a value"
      case "$1" in
        --base) base="$2" ;;
        --head) head="$2" ;;
        --suite) suite="$2" ;;
        --out) out="$2" ;;
        --repo) repo="$2" ;;
        *) ;;
      esac
      shift 2
      ;;
    --merge-base) range_op="..."; shift ;;
    --post-only) mode="post"; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# The abdiff command is operator configuration (e.g. "python -m abdiff"), split
# into words without evaluating it.
read -r -a abdiff_cmd <<<"${ABDIFF_BIN:-abdiff}"
((${#abdiff_cmd[@]} > 0)) || die "ABDIFF_BIN is empty"

# Revisions and names come from whoever triggered the job: accept plain git
# ref/SHA characters only, and nothing that could pass for an option.
check_word() {  # NAME VALUE: a non-empty word of safe characters, not an option
  local name="$1" value="$2" pattern='^[A-Za-z0-9._/@^~+-]+$'
  [[ -n "$value" ]] || die "$name is required"
  [[ "$value" != -* ]] || die "$name must not start with '-': $value"
  [[ "$value" =~ $pattern ]] || die "$name has characters outside [A-Za-z0-9._/@^~+-]: $value"
  [[ "$value" != *..* ]] || die "$name must be one revision, not a range: $value"
}

check_post_target() {  # before anything runs: a bad target should not cost a whole run
  [[ "${ABDIFF_GH_REPO:-}" =~ ^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$ ]] ||
    die "ABDIFF_GH_REPO must be OWNER/NAME to post a comment"
  [[ "${ABDIFF_PR:-}" =~ ^[1-9][0-9]{0,9}$ ]] || die "ABDIFF_PR must be a pull-request number"
  [[ -n "${GITHUB_TOKEN:-}" ]] || die "GITHUB_TOKEN must be set to post a comment"
}

post_comment() {  # render and post "$out/result.json"; returns abdiff comment's exit code
  local gh_repo="${ABDIFF_GH_REPO}" pr="${ABDIFF_PR}"
  local args=(comment --repo "$gh_repo" --pr "$pr")
  if [[ -n "${ABDIFF_API_URL:-}" ]]; then
    args+=(--api-url "$ABDIFF_API_URL")
  fi
  if [[ -n "${ABDIFF_COMMENT_AUTHOR:-}" ]]; then
    args+=(--author "$ABDIFF_COMMENT_AUTHOR")
  fi
  local footer=0
  if [[ -n "${ABDIFF_VERIFIED_HEAD:-}" && -n "${ABDIFF_RUN_URL:-}" ]]; then
    args+=(--head-sha "$ABDIFF_VERIFIED_HEAD" --run-url "$ABDIFF_RUN_URL")
    footer=1
  fi
  # -L: a result.json that is a symbolic link was not written by abdiff.
  if [[ ! -f "$out/result.json" || -L "$out/result.json" ]]; then
    echo "abdiff-ci: no $out/result.json to post" >&2
    if ((footer)); then
      "${abdiff_cmd[@]}" "${args[@]}" --stale || true
    fi
    return 3
  fi
  local rc=0
  "${abdiff_cmd[@]}" "${args[@]}" --result "$out/result.json" || rc=$?
  return "$rc"
}

if [[ "$mode" == "post" || "$post" == "1" ]]; then
  check_post_target
fi
if [[ "$mode" == "post" ]]; then
  rc=0
  post_comment || rc=$?
  exit "$rc"
fi

check_word "base (--base/ABDIFF_BASE)" "$base"
check_word "head (--head/ABDIFF_HEAD)" "$head"
check_word "suite (--suite/ABDIFF_SUITE)" "$suite"
[[ -d "$repo" ]] || die "repository folder not found: $repo"
mkdir -p -- "$out"

# A cache of this job only, unless the operator names one: on a persistent agent
# a shared cache would let one pull request's benchmark prepare the checkouts
# and rounds of the next run (docs/ci.md, "Threat model").
cache="${ABDIFF_CACHE_DIR:-}"
if [[ -z "$cache" ]]; then
  cache="$(mktemp -d "${TMPDIR:-/tmp}/abdiff-cache.XXXXXX")"
  cleanup() {
    env -u GITHUB_TOKEN "${abdiff_cmd[@]}" cache clean --cache-dir "$cache" >/dev/null 2>&1 || true
    rm -rf -- "$cache"
  }
  trap cleanup EXIT
fi

echo "abdiff-ci: ${base}${range_op}${head} suite=${suite} out=${out}" >&2
rc=0
# The benchmark (pull-request code) runs below: keep any GitHub token out of
# its environment (abdiff refuses to measure with GITHUB_TOKEN set). Workers
# get an allow-listed environment; this is not a sandbox (same user): docs/ci.md.
env -u GITHUB_TOKEN -u GH_TOKEN "${abdiff_cmd[@]}" "${base}${range_op}${head}" \
  --repo "$repo" --configs "$suite" --cache-dir "$cache" \
  --format markdown --output "$out/report.md" --json "$out/result.json" \
  ${extra[@]+"${extra[@]}"} || rc=$?
printf '%s\n' "$rc" >"$out/exit_code"

case "$rc" in
  0) echo "abdiff-ci: no unintended change" >&2 ;;
  1) echo "abdiff-ci: unintended change (see $out/report.md)" >&2 ;;
  2) echo "abdiff-ci: bad input or usage (exit 2)" >&2 ;;
  *) echo "abdiff-ci: abdiff could not run (exit $rc)" >&2 ;;
esac

if [[ "$post" == "1" && ("$rc" == 0 || "$rc" == 1) ]]; then
  post_rc=0
  post_comment || post_rc=$?
  if ((post_rc != 0)); then
    echo "abdiff-ci: posting the comment failed (exit $post_rc)" >&2
    # An unintended change (1) stays the headline; a clean run becomes 3.
    ((rc != 0)) || rc=3
  fi
fi
exit "$rc"
