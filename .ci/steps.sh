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
#   RILL_CI_STEP_MINUTES=N
#                         a step still running after N minutes (default 30)
#                         fails: its log gets the threads of each of its
#                         processes (with gdb's backtraces when gdb is
#                         installed), then they are killed. A hang fails
#                         its step with what it was waiting for, where it
#                         would otherwise run the whole job out of time.
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
ci_step_minutes=${RILL_CI_STEP_MINUTES:-30}
# The same in seconds, for trying the watcher out (RILL_CI_STEP_SECONDS=5).
ci_step_seconds=${RILL_CI_STEP_SECONDS:-$((ci_step_minutes * 60))}
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
    # Job control on for the two background jobs: each gets a process group
    # of its own, which the watcher (or we) can kill whole.
    set -m
    (set -e; "$@") >"$log" 2>&1 </dev/null &
    local step=$!
    ci_watch "$step" "$log" "$name" </dev/null &
    local watcher=$!
    set +m
    wait "$step"
    rc=$?
    kill -- -"$watcher" 2>/dev/null
    wait "$watcher" 2>/dev/null
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
      if grep -q '^=== step ".*" still running after' "$log"; then
        # Killed by its watcher: the tests libtest says ran long, then
        # what every thread was doing.
        printf -- '--- what %s says of the step, ran out of time ---\n' "$log"
        grep 'has been running for over' "$log" || true
        sed -n '/^=== step ".*" still running after/,$p' "$log" | head -n 800
      else
        printf -- '--- the last %d lines of %s ---\n' "$ci_tail" "$log"
        tail -n "$ci_tail" "$log"
      fi
      printf -- '--- end of %s ---\n' "$log"
    fi
  } >&2
  exit "$rc"
}

# ci_watch PGID LOG NAME: once the step whose process group is PGID has run
# ci_step_seconds (RILL_CI_STEP_MINUTES, or RILL_CI_STEP_SECONDS), appends
# to LOG what each of its processes' threads is doing, then kills the group.
ci_watch() {
  local pgid=$1 log=$2 name=$3 start=$SECONDS p t
  while ((SECONDS - start < ci_step_seconds)); do
    kill -0 "$pgid" 2>/dev/null || return 0
    sleep 5
  done
  kill -0 "$pgid" 2>/dev/null || return 0
  {
    printf '\n=== step "%s" still running after %s: its processes ===\n' "$name" "$(ci_duration "$ci_step_seconds")"
    for p in $(pgrep -g "$pgid"); do
      printf '\n--- pid %s: %s\n' "$p" "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
      for t in /proc/"$p"/task/*; do
        printf '  thread %s %-16s waits in %s\n' "${t##*/}" "$(cat "$t/comm" 2>/dev/null)" "$(cat "$t/wchan" 2>/dev/null)"
      done
      case $(cat "/proc/$p/comm" 2>/dev/null) in
      bash | sh | sleep | cargo | tee | timeout) continue ;;
      esac
      if command -v gdb >/dev/null; then
        timeout 60 gdb -p "$p" -batch -ex 'thread apply all bt 12' 2>&1 | grep -E '^(Thread|#)' || true
      fi
    done
    printf '\n=== killed ===\n'
  } >>"$log" 2>&1
  kill -TERM -- -"$pgid" 2>/dev/null
  sleep 5
  kill -KILL -- -"$pgid" 2>/dev/null
  return 0
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
