#!/usr/bin/env bash
# Records the example history `examples/history/default-fleet.jsonl` again, from scratch: the fleet
# of `examples/history/fleet.toml` (the default fleet with tools, an approval and a small model
# budget) run by the release binary on a fresh data dir, fed a few hundred chat messages, killed
# with `kill -9` in the middle of a burst, started again on the same data dir, fed the rest and
# stopped cleanly; then exported, imported elsewhere and replayed, which must be identical.
#
# `tests/replay.rs` replays the committed file and checks that it still holds everything below.
# Run this after a deliberate change of behaviour or of the history's format, and commit the new
# file with the change that made it (docs/RUNTIME-SEMANTICS.md, "Recording and replay").
#
#     scripts/record-example-history.sh            # builds the release binary first
#
# What the history holds, and what makes it so every time:
# - both brains: helper and ops think with SmolLM2 (the local brain), reviewer and scribe on the
#   rules;
# - tool calls: the reviewer's procedures call mcp-server-git on a small repository made here
#   with fixed names and dates (so its answers are the same every time);
# - an approval: the scribe's write (mcp-server-filesystem) waits until this script approves it
#   with `mindfleet ai approve`;
# - a spent budget: helper may make 12 model calls an hour; it is asked until the scheduler says
#   its budget is spent (then its steps run on the rules brain);
# - a deferral taken up: the reviewer, focused by `ai state update`, defers a message in the room
#   it is alone in, and takes it up once the focus is cleared;
# - two runs of every persona: the fleet is killed with `kill -9` while a burst is being decided.
#
# Needs: cargo, python3 (JSON), git, ps, and what `scripts/install-tool-servers.sh` and
# `mindfleet models pull` need (Node 20, Python 3.10, the package indexes; both are idempotent).
# It waits on the fleet by polling its admin API with deadlines, never by sleeping a fixed time.
# It takes about 6 minutes on two cores, half a minute of it a reply that waits for budget.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
fleet_file=$root/examples/history/fleet.toml
out=$root/examples/history/default-fleet.jsonl
bin=${CARGO_TARGET_DIR:-$root/target}/release/mindfleet

say() { printf 'record-example-history: [%3d s] %s\n' "$SECONDS" "$*" >&2; }
die() {
    say "$*"
    exit 1
}

(cd "$root" && cargo build --release --quiet)
"$root/scripts/install-tool-servers.sh" >/dev/null
"$bin" models pull >&2

work=$(mktemp -d)
pid=
cleanup() {
    local code=$?
    # A fleet left running by a failure is stopped (its tool servers exit with it).
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ "$code" -eq 0 ]; then
        rm -rf "$work"
    else
        say "kept $work (the fleet's logs run*.log, its data dir, the history) to see what went wrong"
    fi
}
trap cleanup EXIT

# The repository the tool servers serve ("." in the fleet file): the fleet runs in it. Fixed
# author, dates and contents give the same commit ids, so git's answers are the same every run.
repo=$work/repo
mkdir -p "$repo"
commit() {
    git -C "$repo" add -A
    GIT_AUTHOR_DATE=$1 GIT_COMMITTER_DATE=$1 git -C "$repo" -c user.name="Example Maintainer" \
        -c user.email=maintainer@example.invalid -c commit.gpgsign=false commit -q -m "$2"
}
git -C "$repo" init -q -b main # not the user's default branch name
printf 'fn retry() {}\n' >"$repo/retry.rs"
commit "2026-01-05T09:00:00Z" "Add the retry loop"
printf 'fn retry() {\n    // capped at 30 s\n}\n' >"$repo/retry.rs"
commit "2026-01-06T10:30:00Z" "Cap the retry backoff at thirty seconds"
printf 'fn retry() {\n    // capped at 30 s, with jitter\n}\n' >"$repo/retry.rs" # uncommitted: git status shows it

data=$work/data
addr=
runs=0
explain= # a `mindfleet` command whose answer explains a wait that timed out

# --- Waiting on the fleet ----------------------------------------------------------------------

# Runs "$@" every 0.2 s until it succeeds, for at most $2 seconds; names $1 when it times out.
wait_for() {
    local what=$1 secs=$2
    shift 2
    local deadline=$((SECONDS + secs))
    until "$@"; do
        if ((SECONDS >= deadline)); then
            tail -n 40 "$work/run$runs.log" >&2 || true
            # What the fleet says that bears on it, when the caller named it.
            # shellcheck disable=SC2086
            [ -z "$explain" ] || "$bin" $explain --admin "$addr" >&2 || true
            die "timed out after ${secs} s waiting for $what"
        fi
        sleep 0.2
    done
}

# Whether the Python expression $2 holds of `d`, the JSON that `mindfleet $1` prints (words of
# $1 split on spaces) from the running fleet.
holds() {
    local cmd=$1 expr=$2
    # shellcheck disable=SC2086 # the command's words
    "$bin" $cmd --admin "$addr" 2>/dev/null \
        | python3 -c 'import json, sys; d = json.load(sys.stdin); sys.exit(0 if eval(sys.argv[1]) else 1)' "$expr"
}

# Prints the value of the Python expression $2 of the JSON `mindfleet $1` prints.
query() {
    local cmd=$1 expr=$2
    # shellcheck disable=SC2086
    "$bin" $cmd --admin "$addr" | python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1]))' "$expr"
}

# Nothing pending in storage and nothing above `background` queued or running.
IDLE="d['storage']['pending'] == 0 and all(d['scheduler'][c]['queued'] == 0 and d['scheduler'][c]['running'] == 0 for c in ('urgent', 'interactive', 'work'))"
idle() { wait_for "the fleet to be idle" 300 holds dump "$IDLE"; }

# --- Starting and stopping -------------------------------------------------------------------

# Starts the fleet on $data (in the repository, for the tool servers' "."), on a free port, and
# waits until its model, both tool servers and every persona are up.
start() {
    runs=$((runs + 1))
    local log=$work/run$runs.log
    (cd "$repo" && exec "$bin" run "$fleet_file" --data "$data" --admin 127.0.0.1:0) >/dev/null 2>"$log" &
    pid=$!
    have_addr() {
        kill -0 "$pid" 2>/dev/null || die "the fleet exited at start: $(tail -n 20 "$log")"
        addr=$(sed -n 's|.*admin API on http://\([0-9.:]*\).*|\1|p' "$log" | head -n 1)
        [ -n "$addr" ]
    }
    wait_for "the admin address" 60 have_addr
    wait_for "the model, the tool servers and the personas" 120 holds dump \
        "d['llm']['status'] == 'ready' and len(d['tools']['servers']) == 2 and all(s['state'] == 'ready' for s in d['tools']['servers']) and all(p['status'] == 'running' for p in d['personas'])"
    say "run $runs: fleet $pid on $addr"
}

# Whether process $pid has exited (a zombie until waited for counts as exited).
exited() {
    local state
    state=$(ps -o stat= -p "$pid" 2>/dev/null || true)
    [ -z "$state" ] || [[ $state == Z* ]]
}

# SIGTERM, as a person's ctrl-c: the fleet drains, stores what it holds and exits 0.
stop() {
    kill -TERM "$pid"
    wait_for "the fleet to exit after SIGTERM" 120 exited
    local code=0
    wait "$pid" || code=$?
    [ "$code" -eq 0 ] || die "the fleet exited with $code after SIGTERM"
    pid=
}

# --- What is said ------------------------------------------------------------------------------

n=0 # events injected, for their ids
people=(alice bob carol dave erin)

# Injects one event: room, text, and any further `mindfleet inject` flags. Ids are numbered, so
# the history reads the same run after run.
say_in() {
    local room=$1 text=$2
    shift 2
    n=$((n + 1))
    local id
    id=$(printf 'ex-%03d' "$n")
    "$bin" inject --admin "$addr" --id "$id" --room "$room" --from "${people[n % ${#people[@]}]}" \
        --text "$text" "$@" >/dev/null
    last_id=$id
}

general=(
    "has anyone looked at the flaky login test on build %d?"
    "the staging database migration %d finished without errors"
    "reminder: the design review for feature %d is at 3pm"
    "does anyone know how the retry backoff works in the client, case %d?"
    "the onboarding docs, page %d, still describe the old setup"
    "the latency of the checkout service went up %d ms after the deploy"
    "can somebody review the rust change in pull request %d?"
    "how do I get access to the metrics dashboard for team %d?"
)
standup=(
    "yesterday I finished ticket %d, today I pick up the auth refactor"
    "blocked on the deploy pipeline: run %d keeps timing out"
    "today I pair on the incident report %d"
    "I will write the summary of sprint %d after lunch"
)
incidents=(
    "alert %d: disk usage on db-2 above 90 percent"
    "the outage of the payments api, incident %d, is mitigated"
    "latency alert %d on the search cluster cleared by itself"
)
code_review=(
    "pushed a fix for the auth token expiry in pull request %d"
    "the refactor of the retry module in pull request %d is ready for review"
    "security question on pull request %d: do we log the session id?"
)

# $1 messages of chatter across the rooms, no one named: turn-taking picks who answers. Every
# $2 messages (0: never) it waits until the fleet is idle, as a conversation leaves time.
chatter() {
    local count=$1 every=$2 i text
    for ((i = 0; i < count; i++)); do
        local k=$((n + 1))
        case $((k % 6)) in
        0 | 1 | 2) printf -v text "${general[k % ${#general[@]}]}" "$k" && say_in general "$text" ;;
        3) printf -v text "${standup[k % ${#standup[@]}]}" "$k" && say_in standup "$text" ;;
        4) printf -v text "${incidents[k % ${#incidents[@]}]}" "$k" && say_in incidents "$text" ;;
        5) printf -v text "${code_review[k % ${#code_review[@]}]}" "$k" && say_in code-review "$text" ;;
        esac
        if ((every > 0 && (i + 1) % every == 0)); then idle; fi
    done
}

# The persona $1's decision on event $2 whose verdict is $3 (empty: any) and whose reason holds $4.
decided() {
    holds "ai decisions --persona $1" \
        "any(x['event_id'] == '$2' and '$3' in ('', x['verdict']) and '$4' in x['reason'] for x in d['decisions'])"
}

# --- Run 1 -------------------------------------------------------------------------------------

start

chatter 24 8

# The local brain's budget: helper is asked until the scheduler turns a step of its to the rules
# brain because its budget is spent (12 model calls an hour; a mention costs about 3).
questions=(
    "how do I run the integration tests locally?"
    "where is the runbook for the release?"
    "what is the howto for rotating the api keys?"
    "can you explain the onboarding checklist?"
    "where do the docs say how to add a new service?"
    "what does the question about the cache eviction policy mean?"
    "how do I set up the local database?"
    "where is the guide to writing a migration?"
)
SPENT="any('model budget spent (hard_budget)' in x['reason'] for x in d['decisions'])"
for q in "${questions[@]}"; do
    say_in general "@helper $q"
    idle
    if holds "ai decisions --persona helper" "$SPENT"; then break; fi
done
holds "ai decisions --persona helper" "$SPENT" || die "helper's model budget was not spent after ${#questions[@]} questions"
say "helper's budget is spent"

# Tool calls, planned by the reviewer's procedures.
say_in code-review "@reviewer what is the last commit?"
say_in general "@reviewer is there anything uncommitted? show me the git status"
say_in code-review "@reviewer what is the latest commit on the branch?"
idle

# A write that waits for a person: approved from the command line, as an operator would.
say_in standup "@scribe please write down \"the retry fix ships on Thursday\""
write=$last_id
wait_for "the scribe's write to wait for approval" 60 holds "ai approvals" \
    "any(a['event_id'] == '$write' and a['state'] == 'pending' for a in d['approvals'])"
approval=$(query "ai approvals" "[a['id'] for a in d['approvals'] if a['event_id'] == '$write'][0]")
"$bin" ai approve "$approval" --admin "$addr" >/dev/null
idle
[ -f "$repo/notes.md" ] || die "the approved write did not write notes.md"
say "approved the scribe's write ($approval)"

# A deferral taken up: the reviewer, focused, defers a message in the room it is alone in; once
# a person clears the focus it takes the message up and answers it.
"$bin" ai state update --admin "$addr" --persona reviewer --focus "the release" --intensity 0.9 >/dev/null
wait_for "the reviewer's focus" 30 holds "dump --persona reviewer" \
    "d['personas'][0]['self_state']['focus']['intensity'] > 0.8"
# Its priority is given (below the 0.5 a focus lets through; the computed one rises in a room the
# persona spoke in lately, as the reviewer did).
say_in code-review "anyone around to look at the flaky build on the release branch?" --priority 0.45
deferred=$last_id
explain="ai decisions --persona reviewer"
wait_for "the reviewer to defer $deferred" 60 decided reviewer "$deferred" defer "deferred as a preoccupation"
"$bin" ai state update --admin "$addr" --persona reviewer --clear-focus >/dev/null
wait_for "the reviewer to take $deferred up" 60 decided reviewer "$deferred" "" "taking up deferred"
explain=
idle
say "the reviewer deferred $deferred and took it up"

chatter 24 8

# A burst, and `kill -9` while the fleet decides it: the runs end there, and what the burst left
# undecided is decided by the next run.
before=$(query dump "d['storage']['decisions']")
chatter 30 0
wait_for "the burst to be under way" 120 holds dump "d['storage']['decisions'] >= $before + 10"
pending=$(query dump "d['storage']['pending']")
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
pid=
say "killed run 1 with kill -9, $pending deliveries pending"

# --- Run 2 -------------------------------------------------------------------------------------

start
idle
chatter 40 8
say_in code-review "@reviewer what is the last commit now?"
say_in incidents "@ops the deploy to staging failed twice overnight, can you look?"
say_in general "@helper where are the docs for the release checklist?"
idle
chatter 40 8
idle
stop
say "stopped run 2 cleanly after $n events"

# --- The history -------------------------------------------------------------------------------

"$bin" history export "$data" --out "$work/history.jsonl" >/dev/null
"$bin" history import "$work/history.jsonl" --data "$work/imported" >/dev/null
"$bin" replay "$work/imported" >&2 || die "the exported history does not replay identically"
"$bin" replay "$work/imported" --json >"$work/replay.json"

# What it holds, found as the test finds it (by name, wherever the format keeps it): fail here
# rather than write a history that lacks something.
python3 - "$work/history.jsonl" "$work/replay.json" <<'EOF'
import json, sys

lines = [json.loads(l) for l in open(sys.argv[1])][1:]
report = json.load(open(sys.argv[2]))

def walk(v):
    yield v
    children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else []
    for c in children:
        yield from walk(c)

def under(key):
    return [o[key] for l in lines for o in walk(l) if isinstance(o, dict) and key in o]

brains = set()
for begin in under("Begin"):
    brains |= {o["brain"] for o in walk(begin) if isinstance(o, dict) and isinstance(o.get("brain"), str)}
# Delivered, or restored after the kill -9 and taken from the inbox.
events = {
    o["event"]["id"]
    for o in walk(under("Deliver") + under("Next"))
    if isinstance(o, dict) and isinstance(o.get("event"), dict) and "id" in o["event"]
}
runs = {p["persona"]: p["runs"] for p in report["personas"]}
# A grant the spent budget turned to the rules brain: {"RulesOnly": "hard_budget"}.
spent = [g for g in under("grant") if "hardbudget" in json.dumps(g.get("outcome")).lower().replace("_", "")]
decisions = [o for l in lines for o in walk(l) if isinstance(o, dict) and {"verdict", "reason", "event_id"} <= o.keys()]
deferred = {d["event_id"] for d in decisions if d["verdict"] == "defer"}
taken_up = {d["event_id"] for d in decisions if d["reason"].startswith("taking up deferred") and d["event_id"] in deferred}
held = {
    "brains": sorted(brains),
    "events": len(events),
    "runs": runs,
    "tool answers": len(under("ToolAnswered")),
    "approvals": len(under("ApprovalAnswered")),
    "budget-spent grants": len(spent),
    "deferrals taken up": len(taken_up),
}
print("record-example-history: the history holds", json.dumps(held), file=sys.stderr)
missing = [k for k, v in held.items() if not v]
if brains != {"local", "rules"}:
    missing.append("both brains")
if max(runs.values(), default=0) < 2:
    missing.append("a second run")
if missing:
    sys.exit(f"record-example-history: the history lacks: {', '.join(missing)}")
EOF

cp "$work/history.jsonl" "$out"
say "wrote ${out#"$root"/} ($(wc -c <"$out") bytes, $(wc -l <"$out") lines)"
