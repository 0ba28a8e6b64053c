#!/usr/bin/env bash
# abdiff-ci.sh: run abdiff for one pull request from any CI system (Jenkins,
# GitLab, Buildkite, ...), e.g. a job triggered by a "/bot run" comment.
#
# Two steps, never one: run it without any token to compare BASE..HEAD on a
# suite (it writes the markdown report and the result JSON to an output folder
# and keeps abdiff's exit code); then, in a separate step that starts after
# every process of the first has exited (ideally on another machine), run it
# again with --post-only and the token to post the report of that result JSON.
# A token in the measuring step's environment is refused (exit 2): the pull
# request's benchmark could read it from this script's /proc/PID/environ. The
# comment is always rendered by `abdiff comment --result` from the validated
# result JSON, never taken from report.md, which the run step (pull-request
# code) could have rewritten, and posted as a report only when the measuring
# step exited 0 or 1 (as this script recorded it after every process of the
# benchmark had ended, or as your CI recorded it: ABDIFF_MEASURED_EXIT) and the
# result agrees with itself; otherwise the comment says the measurement failed.
# The output folder is this script's own: a link there is refused, and it is
# emptied before measuring. Why and how: docs/ci.md.
#
# Exit codes: 0 no unintended change; 1 unintended change; 2 bad input or
# usage; 3 abdiff (or posting the comment) could not run.
set -Eeuo pipefail
# A command of this script that fails is this script's failure: exit 3, never its own
# status (a failed rm or mkdir exits 1, which a CI would read as an unintended change).
trap 'exit 3' ERR

usage() {
  cat <<'EOF'
usage: abdiff-ci.sh [--base REV] [--head REV] [--suite NAME] [--out DIR] [--repo PATH]
                    [--merge-base] [--post-only] [-- EXTRA_ABDIFF_ARGS...]

Step 1 (measure, no token in the environment): abdiff-ci.sh --base REV --head REV ...
Step 2 (post, after step 1 has exited):        abdiff-ci.sh --post-only --out DIR

Options (each has an environment variable; the option wins):
  --base REV     ABDIFF_BASE    side A, e.g. origin/main or a SHA (required unless --post-only)
  --head REV     ABDIFF_HEAD    side B, e.g. the PR head SHA (required unless --post-only)
  --suite NAME   ABDIFF_SUITE   config suite (default: mtp)
  --out DIR      ABDIFF_OUT     output folder (default: abdiff-out)
  --repo PATH    ABDIFF_REPO    the benchmark's git checkout (default: .)
  --merge-base                  compare against the merge base of BASE and HEAD (BASE...HEAD)
  --post-only                   do not run anything; post the report of DIR/result.json
  -- ARGS                       passed to abdiff unchanged, e.g. -- --rounds 6 --expect backend=DSA

Posting (--post-only; run from a folder outside any checkout):
  ABDIFF_GH_REPO=OWNER/NAME  ABDIFF_PR=N  GITHUB_TOKEN=...  [ABDIFF_API_URL=URL]
  [ABDIFF_COMMENT_AUTHOR=LOGIN]  (the account whose comment is updated; default: the token's)
  [ABDIFF_VERIFIED_HEAD=SHA ABDIFF_RUN_URL=URL]  (footer: the head you verified was measured,
                                 and this build; with no result, the earlier comment is marked stale)
  [ABDIFF_MEASURED_EXIT=N]  (the measuring step's exit code as your CI recorded it; default:
                             DIR/exit_code, which step 1 wrote once the benchmark had ended)
Other: ABDIFF_BIN (the abdiff command, default: abdiff; to post, an install the
                   measuring step could not write, e.g. "/opt/abdiff/bin/python -I -m abdiff")
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
  "${abdiff_cmd[@]}" "${args[@]}" --result "$out/result.json" \
    --exit-code "$(measured_exit)" || rc=$?
  return "$rc"
}

measured_exit() {  # what step 1 exited with: ABDIFF_MEASURED_EXIT, else DIR/exit_code, else 3
  local said="${ABDIFF_MEASURED_EXIT:-}"
  if [[ -z "$said" && -f "$out/exit_code" && ! -L "$out/exit_code" ]]; then
    said="$(head -c 8 "$out/exit_code" | tr -d '[:space:]')"
  fi
  [[ "$said" =~ ^[0-9]{1,3}$ ]] || said=3
  printf '%s\n' "$said"
}

if [[ "$mode" == "post" ]]; then
  check_post_target
  # From an empty folder of its own: a checkout's files (an abdiff/ package, a
  # sitecustomize.py) must not be importable by the process that holds the token.
  [[ "$out" == /* ]] || out="$PWD/$out"
  post_cwd="$(mktemp -d "${TMPDIR:-/tmp}/abdiff-post.XXXXXX")"
  trap 'rm -rf -- "$post_cwd"' EXIT
  cd "$post_cwd"
  rc=0
  post_comment || rc=$?
  exit "$rc"
fi
if [[ "${ABDIFF_POST_COMMENT:-0}" == "1" ]]; then
  die "ABDIFF_POST_COMMENT=1 would hold the token while the pull request's code runs; measure, then post in a separate step with --post-only (docs/ci.md)"
fi

check_word "base (--base/ABDIFF_BASE)" "$base"
check_word "head (--head/ABDIFF_HEAD)" "$head"
check_word "suite (--suite/ABDIFF_SUITE)" "$suite"
[[ -d "$repo" ]] || die "repository folder not found: $repo"
# The output folder is this script's own: never a link (a pull request can commit
# one where the default abdiff-out lies, to a folder its benchmark can write), emptied
# first (nothing in it was written by this measurement).
[[ ! -L "$out" ]] || die "the output folder $out is a link; give --out a folder of this job"
[[ ! -e "$out" || -d "$out" ]] || die "the output folder $out is not a folder"
rm -rf -- "$out"
mkdir -p -- "$out"

# A cache of this job only, unless the operator names one: on a persistent agent
# a shared cache would let one pull request's benchmark prepare the checkouts
# and rounds of the next run (docs/ci.md, "Threat model").
cache="${ABDIFF_CACHE_DIR:-}"
if [[ -z "$cache" ]]; then
  cache="$(mktemp -d "${TMPDIR:-/tmp}/abdiff-cache.XXXXXX")"
  cleanup() {
    "${abdiff_cmd[@]}" cache clean --cache-dir "$cache" >/dev/null 2>&1 || true
    rm -rf -- "$cache"
  }
  trap cleanup EXIT
fi

echo "abdiff-ci: ${base}${range_op}${head} suite=${suite} out=${out}" >&2
rc=0
# The benchmark (pull-request code) runs below. No token is removed here: it
# would stay in this script's own /proc/PID/environ, in the benchmark's reach.
# abdiff refuses to measure (exit 2) while a token-like variable is in its
# environment or a parent's. Workers get an allow-listed environment; this is
# not a sandbox (same user): docs/ci.md.
"${abdiff_cmd[@]}" "${base}${range_op}${head}" \
  --repo "$repo" --configs "$suite" --cache-dir "$cache" \
  --format markdown --output "$out/report.md" --json "$out/result.json" \
  ${extra[@]+"${extra[@]}"} || rc=$?
# Every process of the benchmark has ended (abdiff ends them): what is written now is
# this script's. An output folder replaced meanwhile holds nothing of the measurement.
if [[ -L "$out" || ! -d "$out" ]]; then
  echo "abdiff-ci: $out was replaced while the benchmark ran; the measurement failed" >&2
  rm -f -- "$out"
  mkdir -p -- "$out"
  rc=3
fi
# Written into a file made anew (mktemp: never through a link) and renamed over
# exit_code: a link or FIFO a process of the user planted there meanwhile (with
# --sandbox off, one the benchmark left) is replaced, never written through.
rm -rf -- "$out/exit_code"
recorded="$(mktemp "$out/.exit_code.XXXXXX")"
printf '%s\n' "$rc" >"$recorded"
chmod 644 -- "$recorded"  # as a plain write would leave it (mktemp's is 600)
if ! mv -fT -- "$recorded" "$out/exit_code"; then
  echo "abdiff-ci: could not record the exit code in $out/exit_code" >&2
  rc=3
fi

case "$rc" in
  0) echo "abdiff-ci: no unintended change" >&2 ;;
  1) echo "abdiff-ci: unintended change (see $out/report.md)" >&2 ;;
  2) echo "abdiff-ci: bad input or usage (exit 2)" >&2 ;;
  *) echo "abdiff-ci: abdiff could not run (exit $rc)" >&2 ;;
esac

exit "$rc"
