#!/usr/bin/env bash
# Every sweep behind `python -m treernn report claims`, one after another, each a named sweep
# (sweep_id): run this script again after any stop (a session's end, a crash, Ctrl-C) and each
# sweep continues where it stopped, finished jobs skipped and interrupted ones resumed from their
# last checkpoint. Run it from a checkout of a fixed commit (git worktree add ../treernn-runs
# <commit>) so that code changes never reach a running sweep.
#   TREERNN_DATA_DIR=... bash scripts/run_claims.sh            # all of them, in this order
#   TREERNN_DATA_DIR=... bash scripts/run_claims.sh lm tdlm    # some of them
# Budgets: the new tables (lm, tdlm) at their own; the comparisons that were undecided at the
# tables' short budgets (logic ON-LSTM vs LSTM, systematic generalisation, SST-2 on sentences only)
# at budgets where validation should have stopped rising; `report claims` says "undecided" where it
# had not. lm-long and tdlm-long re-run the new tables at four and five times their budgets, after
# the first runs (two epochs each) ended with validation perplexity still falling fast;
# listops-long re-runs ListOps at three times its budget, after the LSTM's and the Transformer's
# validation accuracy was still rising at the end of listops.
set -euo pipefail
cd "$(dirname "$0")/.."
run() {
    local name=$1
    shift
    echo "== $(date -Is) sweep $name: python train.py -m $*"
    python train.py -m "$@" sweep_id="$name"
}
declare -A SWEEPS=(
    [lm]="table=lm"
    [tdlm]="table=tdlm"
    [sst2-phrases]="table=sst2 task.datamodule.train_subtrees=true trainer.max_steps=3000 trainer.val_check_interval=300"
    [listops]="table=listops"
    [logic-long]="table=logic model=onlstm,lstm,ordered_memory trainer.max_steps=10000 trainer.val_check_interval=500"
    [sysgen-long]="table=sysgen trainer.max_steps=5000 trainer.val_check_interval=500"
    [tdlm-long]="table=tdlm trainer.max_steps=1920"
    [lm-long]="table=lm trainer.max_steps=11000"
    [listops-long]="table=listops trainer.max_steps=4500 trainer.val_check_interval=450"
)
ORDER=(lm tdlm sst2-phrases listops logic-long sysgen-long tdlm-long lm-long listops-long)
# the sweep of each table that the claims report reads (the longest budget)
CLAIMS=(lm-long tdlm-long sst2-phrases listops-long logic-long sysgen-long)
for name in "${@:-${ORDER[@]}}"; do
    if [[ -z "${SWEEPS[$name]:-}" ]]; then
        echo "unknown sweep $name; choose from: ${ORDER[*]}" >&2
        exit 2
    fi
    # shellcheck disable=SC2086 # the overrides are words
    run "$name" ${SWEEPS[$name]}
done
echo "== $(date -Is) done; the claims: python -m treernn report claims outputs/tables/*/{$(IFS=,; echo "${CLAIMS[*]}")}"
