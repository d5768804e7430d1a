#!/usr/bin/env bash
# The planned sweeps behind `python -m treernn report claims`: each plan in results/plans/ that is
# run here (`run: true`) names its sweep and command (`python -m treernn report plan` writes one;
# docs/claims.md). Commit the plans first, then run this from a checkout of that commit
# (git worktree add ../treernn-runs <commit>), so that no later change reaches a running sweep:
#   TREERNN_DATA_DIR=... bash scripts/run_claims.sh                 # every plan run here, in order
#   TREERNN_DATA_DIR=... bash scripts/run_claims.sh claim-09 claim-05  # some of them
# Run it again after any stop (a lost machine, a crash, Ctrl-C): each sweep goes on where it
# stopped, finished jobs skipped and interrupted ones resumed from their last checkpoint.
# Jobs are kept in results/tables/<table>/<sweep> (TREERNN_RESULTS_DIR; `python -m treernn sweep
# archive`): finished ones without their weights, unfinished ones with their newest and best
# checkpoints (so that a machine that loses outputs/ but keeps results/ resumes them), after each
# sweep, on Ctrl-C or SIGTERM, and every ARCHIVE_EVERY seconds (default 600) while a sweep runs;
# each sweep first restores them (`sweep restore`). Commit a sweep's results once it has finished.
# Stop it with Ctrl-C, or a signal to its whole process group (`kill -INT -<pgid>`): each running
# job stops after its batch with a checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
# this checkout's code, whichever checkout treernn is installed from (pip install -e)
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# last.ckpt also every 10 minutes of training: a machine taken back without a signal loses at
# most that
export TREERNN_CHECKPOINT_MINUTES=${TREERNN_CHECKPOINT_MINUTES:-10}
RESULTS=${TREERNN_RESULTS_DIR:-results}
PLANS=results/plans
archive() {  # sweep dir, copy dir; a failed copy is said, and the sweep goes on
    [[ -f $1/multirun.yaml ]] || return 0
    python -m treernn sweep archive --unfinished "$1" "$2" | tail -n 3 && return 0
    echo "== $(date -Is) sweep archive --unfinished $1 $2 failed (see above); run it again" >&2
}
last_archive() {  # sweep dir, copy dir, keeper pid, why
    kill "$3" 2>/dev/null || true
    wait "$3" 2>/dev/null || true
    echo "== $(date -Is) $4: archiving $1 in $2"
    archive "$1" "$2"
}
plan_command() {  # plan file -> "<run: yes|no> <table> <sweep> <overrides...>"
    python - "$1" <<'PYTHON'
import sys
from treernn.reporting.claims.plans import read_plan
plan = read_plan(sys.argv[1])
print("yes" if plan.run else "no", plan.table, plan.sweep, *plan.command())
PYTHON
}
run() {  # plan name (claim-NN)
    local words
    read -r -a words <<< "$(plan_command "$PLANS/$1.yaml")"
    local runs=${words[0]} table=${words[1]} name=${words[2]}
    local overrides=("${words[@]:3}")
    if [[ $runs != yes ]]; then
        echo "== $(date -Is) $1: not run here (run: false; see its needs)"
        return 0
    fi
    local sweep=outputs/tables/$table/$name kept=$RESULTS/tables/$table/$name
    if [[ -f $kept/multirun.yaml ]]; then
        python -m treernn sweep restore "$kept" "$sweep"
        if python -m treernn sweep status --exit-code "$kept" > /dev/null; then
            echo "== $(date -Is) $1: every job of $name finished before ($kept), skipped"
            return 0
        fi
    fi
    echo "== $(date -Is) $1: python train.py -m ${overrides[*]}"
    # the keeper's sleep in the background and waited for, so that a kill ends it at once; a copy
    # under way finishes first, and the last copy waits for it
    (trap 'kill $! 2>/dev/null; exit 0' TERM
     while true; do sleep "${ARCHIVE_EVERY:-600}" & wait $!; archive "$sweep" "$kept"; done) &
    local keeper=$!
    trap 'last_archive "$sweep" "$kept" $keeper SIGINT; exit 130' INT
    trap 'last_archive "$sweep" "$kept" $keeper SIGTERM; exit 143' TERM
    local status=0
    python train.py -m "${overrides[@]}" || status=$?
    trap - INT TERM
    last_archive "$sweep" "$kept" $keeper "train.py exited $status"
    return $status
}
if [[ $# -gt 0 ]]; then
    names=("$@")
else
    names=()
    for path in "$PLANS"/claim-*.yaml; do names+=("$(basename "$path" .yaml)"); done
fi
for name in "${names[@]}"; do
    if [[ ! -f $PLANS/$name.yaml ]]; then
        echo "no plan $PLANS/$name.yaml; the plans: $(ls "$PLANS")" >&2
        exit 2
    fi
    run "$name"
done
echo "== $(date -Is) done; the claims: python -m treernn report claims $RESULTS/tables/*/*"
