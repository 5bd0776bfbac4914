# Steps for .ci/run and .ci/test, sourced by both: each step runs with its
# output captured in a log file of its own and prints one line,
#
#   ==> cargo fmt --check ... ok (3 s)
#
# On a failure it prints the step's name, its log's path and the log's last
# RILL_CI_TAIL lines (default 60), and the script exits with the step's
# status. `ci_summary` ends a run with the number of steps and the time.
#
#   RILL_CI_VERBOSE=1     stream every step's output as well (it still goes
#                         to the log)
#   RILL_CI_ONLY=WORDS    run only the steps whose names contain WORDS
#                         (case-insensitive; several, separated by commas,
#                         run the steps matching any of them)
#
# Logs: target/ci-logs/<n>-<name>.log, n counting from 01 across .ci/run and
# the .ci/test it calls (the directory is emptied when a run starts; .ci/run
# hands its count and start time to .ci/test through RILL_CI_STEPS_DONE and
# RILL_CI_STARTED).
#
# A step is a command, usually a shell function of the calling script; it
# runs in a subshell with `set -e`, so a step cannot change the caller's
# variables (a value two steps need is computed by a function both call).

ci_logs=${RILL_CI_LOGS:-target/ci-logs}
ci_tail=${RILL_CI_TAIL:-60}
ci_done=${RILL_CI_STEPS_DONE:-0}
ci_started=${RILL_CI_STARTED:-$(date +%s)}
if ((ci_done == 0)); then
  rm -rf "$ci_logs"
fi
mkdir -p "$ci_logs"

# "73 s", or "4 min 05 s" from a minute on.
ci_duration() {
  local s=$1
  if ((s < 60)); then
    printf '%d s' "$s"
  else
    printf '%d min %02d s' $((s / 60)) $((s % 60))
  fi
}

# True if the step named $1 is selected by RILL_CI_ONLY (or there is none).
ci_selected() {
  local only=${RILL_CI_ONLY:-} name=${1,,} word words
  [ -n "$only" ] || return 0
  IFS=',' read -ra words <<<"${only,,}"
  for word in "${words[@]}"; do
    [ -n "$word" ] && [[ "$name" == *"$word"* ]] && return 0
  done
  return 1
}

# ci_step NAME COMMAND [ARGS...]
ci_step() {
  local name=$1
  shift
  ci_selected "$name" || return 0
  ci_done=$((ci_done + 1))
  local slug log start rc took
  # The name as a file name: lower case, runs of anything else as one dash,
  # at most 60 characters.
  slug=$(tr '[:upper:]' '[:lower:]' <<<"$name" | sed -e 's/[^a-z0-9+]\{1,\}/-/g' -e 's/^-//' | cut -c1-60)
  slug=${slug%-}
  log=$ci_logs/$(printf '%02d' "$ci_done")-$slug.log
  start=$SECONDS
  set +e
  if [ "${RILL_CI_VERBOSE:-0}" = 1 ]; then
    printf '\n==> %s\n' "$name"
    (set -e; "$@") 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    printf '==> %s ... ' "$name"
  else
    printf '==> %s ... ' "$name"
    (set -e; "$@") >"$log" 2>&1 </dev/null
    rc=$?
  fi
  set -e
  took=$(ci_duration $((SECONDS - start)))
  if ((rc == 0)); then
    printf 'ok (%s)\n' "$took"
    return 0
  fi
  printf 'FAILED (%s, exit status %d)\n' "$took" "$rc"
  {
    printf '\nstep failed: %s\nits log: %s\n' "$name" "$log"
    if [ "${RILL_CI_VERBOSE:-0}" != 1 ]; then
      printf -- '--- the last %d lines of %s ---\n' "$ci_tail" "$log"
      tail -n "$ci_tail" "$log"
      printf -- '--- end of %s ---\n' "$log"
    fi
  } >&2
  exit "$rc"
}

# Exports the count and start time for a script this one runs next, so that
# its steps' logs number on and its summary covers both.
ci_hand_on() {
  export RILL_CI_STEPS_DONE=$ci_done RILL_CI_STARTED=$ci_started
}

ci_summary() {
  local took
  took=$(ci_duration $(($(date +%s) - ci_started)))
  if ((ci_done == 0)); then
    echo "no step's name matches RILL_CI_ONLY=${RILL_CI_ONLY:-}" >&2
    exit 2
  fi
  local steps="all $ci_done steps"
  ((ci_done > 1)) || steps="the one step"
  printf '\n%s passed in %s (logs in %s/)\n' "$steps" "$took" "$ci_logs"
}
