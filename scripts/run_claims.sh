#!/usr/bin/env bash
# Every sweep behind `python -m treernn report claims`, one after another, each a named sweep
# (sweep_id): run this script again after any stop (a lost machine, a crash, Ctrl-C) and each
# sweep continues where it stopped, finished jobs skipped and interrupted ones resumed from their
# last checkpoint. Run it from a checkout of a fixed commit (git worktree add ../treernn-runs
# <commit>) so that code changes never reach a running sweep.
#   TREERNN_DATA_DIR=... bash scripts/run_claims.sh            # all of them, in this order
#   TREERNN_DATA_DIR=... bash scripts/run_claims.sh lm tdlm    # some of them
# Finished jobs are kept without their weights in results/tables/<table>/<sweep>
# (TREERNN_RESULTS_DIR; `python -m treernn sweep archive`): after each sweep, on Ctrl-C or SIGTERM,
# and every ARCHIVE_EVERY seconds (default 600) while a sweep runs. Committed, they survive a
# machine that loses outputs/: each sweep first restores them (`sweep restore`) and skips those
# jobs, and `report claims results/tables/...` prints the claims from any clone. Unfinished jobs
# are kept there too, each with its newest and best checkpoints (`--unfinished`; a few MB a job for
# the logic models): a machine that loses outputs/ but keeps the results directory (a new
# checkout that recovers its uncommitted files, 2026-11-30) resumes them instead of starting
# them again. Commit a sweep's results once it has finished (its kept checkpoints are gone then).
# Stop it with Ctrl-C, or a signal to its whole process group (`kill -INT -<pgid>`): each running
# job stops after its batch with a checkpoint. A signal to this script's process alone waits, as
# bash does, for the running sweep to end.
# Budgets: the new tables (lm, tdlm) at their own; the comparisons that were undecided at the
# tables' short budgets (logic ON-LSTM vs LSTM, systematic generalisation, SST-2 on sentences only)
# at budgets where validation should have stopped rising; `report claims` says "undecided" where it
# had not. lm-long and tdlm-long re-run the new tables at four and five times their budgets, after
# the first runs (two epochs each) ended with validation perplexity still falling fast;
# listops-long re-runs ListOps at three times its budget, after the LSTM's and the Transformer's
# validation accuracy was still rising at the end of listops. tdlm-stop gives the EWT models 7,680
# updates (40 epochs) so that the recipe's own rule (halve the lr each epoch after validation first
# misses, stop at the next miss; REFERENCE.md) ends each run, after tdlm-long (1,920) left some
# seeds at lr 1 with validation falling fast and others halved to 1/32 since epoch 5.
# listops-stop gives ListOps three times listops-long's 4,500 updates, after every model's
# validation accuracy was still rising at the end of listops-long (Ordered Memory 68.6 -> 76.8 over
# its last 900 updates, one seed at 93.0; about 45 min for the 12 jobs on a 2-core Zen 5).
# listops-27k doubles listops-stop (2 h 38 min), after which the LSTM's and the Transformer's mean
# validation accuracy was still best at the last validation, by 0.07 and 0.23 points on a
# plateau, while Ordered Memory's had peaked at 12,149 updates.
# logic-40k gives ON-LSTM and LSTM four times logic-long's 10,000 updates (claim 4; about 7 min a
# job there), after both models' validation accuracy was still rising at its end (ON-LSTM 63.1 ->
# 63.3, LSTM 66.5 -> 66.7 over the last 500 updates); Ordered Memory's comparison stays on
# logic-long (`report claims` reads, per comparison, the largest budget that ran both models).
# sysgen-10k doubles sysgen-long (claim 6), after both models' validation was still rising at
# 5,000 updates. sysgen-20k doubles sysgen-10k, after both were still rising at 10,000 (Ordered
# Memory 94.1 -> 94.6 on A over the last 500 updates; the LSTM climbing late, on A from 5,000
# updates and one seed on C from 8,500): about 15 h for Ordered Memory's 9 jobs on a 2-core
# Xeon two at a time and 4-5 h for the LSTM's. It runs before lm-33k, whose claims will most
# likely stay undecided whatever it gives.
# logic-80k doubles logic-40k for ON-LSTM and LSTM (claim 4; an ON-LSTM job about 2 h on a 2-core
# Zen 5, 4.6 h on a Zen 3 (4.7-4.9 updates/s), the LSTM's shorter;
# validation every 1,000 updates as there, since the lr halving counts validations),
# after the LSTM's mean validation accuracy was still rising at its end (82.6 -> 91.0 over the last
# 7,000 updates, as its seeds left the plateau one after another) while ON-LSTM's had been flat at
# 65.0-65.3 since 25,000 updates; it runs before lm-33k, whose claims will most likely stay
# undecided whatever it gives.
# logic-onlstm-12k runs claim 4 at the ON-LSTM paper's width (table=logic_onlstm: one layer of
# 400 units, embedding 128, the ON-LSTM repository's optimiser), 12,000 updates (about 11 epochs;
# about 1 s an update a job on a 2-core Xeon: some 10 h for the 6 jobs), validation every 1,000
# updates as in logic-40k: at table=logic's 80 units ON-LSTM stayed on the 65% plateau for 40,000
# updates, while at 400 (one seed each, 2026-11-29) both models had left it within 1,500 updates.
# The claims report reads it for claim 4 before table=logic; logic-80k, which then serves claim 5
# with logic-80k-om, runs after it.
# logic-onlstm-24k doubles logic-onlstm-12k (claim 4), extending its jobs (sweep extend), after
# the LSTM's validation accuracy was still rising at 12,000 updates (seed 1: 95.5 -> 95.6 over the
# last 1,000) and ON-LSTM's by tenths: about 4 h for the 6 jobs' 12,000 more updates each on the
# AMX Xeon, two at a time (2.3-2.7 updates/s a job), 8 h from zero.
# lm-33k gives the language models three times lm-long's 11,000 updates (claims 1-3; about 11 h
# for the 10 jobs on 2 cores), after both models' validation perplexity was still falling by 2-4
# points an epoch at its end (ON-LSTM 112.4 -> 108.7, LSTM 112.6 -> 110.4 over the last epoch):
# it follows the gap and narrows its interval, but validation will most likely still be falling
# (the recipe converges over hundreds of epochs, a GPU's job), so the rule may keep them undecided.
# logic-80k-om runs Ordered Memory on logic-80k's terms (claim 5), after its validation accuracy
# was still rising at the end of logic-long (10,000 updates; 0.906 mean at the last validation)
# and the LSTM's at the end of logic-40k: `report claims` reads the two sweeps as one (the same
# table, budget and overrides), so the LSTM's runs are not repeated. About 13 h a job on a 2-core
# Xeon (Ordered Memory took 100 min per 10,000 updates there, two jobs at a time); it runs last,
# after logic-80k has shown whether the LSTM's validation stops rising within 80,000 updates.
# Its three jobs run at once (hydra.launcher.n_jobs=3; a launcher setting, not one of the
# sweep's overrides that `report claims` compares): two workers would run two jobs and then the
# third alone on one of the two cores. On a 2-core Zen 3, table=logic's Ordered Memory update
# (80 units, one thread) took 0.84 s alone, 0.84-0.91 s two at a time and 1.29-1.40 s three at a
# time (2.26-2.29 against 2.20-2.24 updates/s in all, two rounds, 2026-11-30): about 30 h for the
# three jobs of 80,000 updates three at a time, against about 38 h two and then one.
set -euo pipefail
cd "$(dirname "$0")/.."
# This checkout's code: with treernn installed editable (pip install -e) from another checkout,
# `python train.py` in a worktree imported that checkout's src/, so code changes there reached
# the running sweep (seen 2026-11-29).
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# last.ckpt also every 10 minutes of training (checkpoint_minutes, through its environment default
# so that the sweeps' overrides stay the ones they started with): a machine taken back without a
# signal loses at most that, where logic-80k-om's jobs validate about every 20 minutes (1,000 updates)
export TREERNN_CHECKPOINT_MINUTES=${TREERNN_CHECKPOINT_MINUTES:-10}
# Finished jobs are kept in (and restored from) $RESULTS: point TREERNN_RESULTS_DIR at the main
# checkout's results/ when this worktree's commit predates the jobs kept there.
RESULTS=${TREERNN_RESULTS_DIR:-results}
archive() {  # sweep dir, copy dir; a failed copy is said, and the sweep goes on
    [[ -f $1/multirun.yaml ]] || return 0
    python -m treernn sweep archive --unfinished "$1" "$2" | tail -n 3 && return 0
    echo "== $(date -Is) sweep archive --unfinished $1 $2 failed (see above); run it again" >&2
}
run() {
    local name=$1
    shift
    local table=${1#table=}  # every sweep's first override names its table
    local sweep=outputs/tables/$table/$name kept=$RESULTS/tables/$table/$name
    if [[ -f $kept/multirun.yaml ]]; then
        python -m treernn sweep restore "$kept" "$sweep"
        # every job finished before: nothing to run (train.py would only log that into each job)
        if python -m treernn sweep status --exit-code "$kept" > /dev/null; then
            echo "== $(date -Is) sweep $name: every job finished before ($kept), skipped"
            return 0
        fi
    fi
    local base=${EXTENDS[$name]:-}
    if [[ -n $base && ! -e $sweep && ! -f $kept/multirun.yaml ]]; then
        # its jobs start where $base's ended, where $base's checkpoints are here; else from zero
        local budget=()
        for word in "$@"; do [[ $word == trainer.max_* ]] && budget+=("$word"); done
        if python -m treernn sweep extend "outputs/tables/$table/$base" "${budget[@]}" \
            --name "$name" --no-run; then
            echo "== $(date -Is) sweep $name: extends $base"
        else
            echo "== $(date -Is) sweep $name: $base not extended (see above); from the start"
        fi
    fi
    echo "== $(date -Is) sweep $name: python train.py -m $*"
    # its sleep in the background and waited for, so that a kill ends it at once (a sleep in the
    # foreground outlived its shell by up to ARCHIVE_EVERY seconds); a copy under way finishes
    # first, and the last copy waits for it (two copies at once rename the same partial file)
    (trap 'kill $! 2>/dev/null; exit 0' TERM
     while true; do sleep "${ARCHIVE_EVERY:-600}" & wait $!; archive "$sweep" "$kept"; done) &
    local keeper=$!
    trap 'last_archive "$sweep" "$kept" $keeper SIGINT; exit 130' INT
    trap 'last_archive "$sweep" "$kept" $keeper SIGTERM; exit 143' TERM
    local status=0
    python train.py -m "$@" sweep_id="$name" || status=$?
    trap - INT TERM
    last_archive "$sweep" "$kept" $keeper "train.py exited $status"
    return $status
}
last_archive() {  # sweep dir, copy dir, keeper pid, why
    kill "$3" 2>/dev/null || true
    wait "$3" 2>/dev/null || true
    echo "== $(date -Is) $4: archiving $1 in $2"
    archive "$1" "$2"
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
    [tdlm-stop]="table=tdlm trainer.max_steps=7680"
    [listops-stop]="table=listops trainer.max_steps=13500 trainer.val_check_interval=1350"
    [listops-27k]="table=listops trainer.max_steps=27000 trainer.val_check_interval=1350"
    [logic-40k]="table=logic model=onlstm,lstm trainer.max_steps=40000 trainer.val_check_interval=1000"
    [sysgen-10k]="table=sysgen trainer.max_steps=10000 trainer.val_check_interval=500"
    [sysgen-20k]="table=sysgen trainer.max_steps=20000 trainer.val_check_interval=500"
    [logic-80k]="table=logic model=onlstm,lstm trainer.max_steps=80000 trainer.val_check_interval=1000"
    [lm-33k]="table=lm trainer.max_steps=33000"
    [logic-onlstm-12k]="table=logic_onlstm trainer.max_steps=12000 trainer.val_check_interval=1000"
    [logic-80k-om]="table=logic model=ordered_memory trainer.max_steps=80000 trainer.val_check_interval=1000 hydra.launcher.n_jobs=3"
    [logic-onlstm-24k]="table=logic_onlstm trainer.max_steps=24000 trainer.val_check_interval=1000"
)
# sweeps that train another sweep's jobs further (python -m treernn sweep extend): where that
# sweep ran in this checkout, with its jobs' checkpoints, each job starts where it ended (the same
# metrics as a run from zero, in half the updates for a doubled budget); elsewhere from zero
declare -A EXTENDS=(
    [logic-onlstm-24k]=logic-onlstm-12k
)
# logic-80k comes after sysgen-20k: its two unfinished LSTM jobs came back without their
# checkpoints on 2026-12-01 (ignored by git then) and start from zero, and with logic-80k-om it
# serves claim 5 only, which the LSTM's validation, still rising at 80,000 updates in seed 1,
# most likely keeps undecided; claim 4 reads logic-onlstm-24k and claim 6 sysgen-20k.
ORDER=(lm tdlm sst2-phrases listops logic-long sysgen-long tdlm-long lm-long listops-long tdlm-stop
    listops-stop listops-27k logic-40k sysgen-10k logic-onlstm-12k logic-onlstm-24k sysgen-20k
    logic-80k lm-33k logic-80k-om)
# the sweeps that the claims report reads (per comparison, the longest budget that ran both models)
CLAIMS=(lm-33k tdlm-stop sst2-phrases listops-27k logic-long logic-80k logic-80k-om logic-onlstm-12k
    logic-onlstm-24k sysgen-10k sysgen-20k)
for name in "${@:-${ORDER[@]}}"; do
    if [[ -z "${SWEEPS[$name]:-}" ]]; then
        echo "unknown sweep $name; choose from: ${ORDER[*]}" >&2
        exit 2
    fi
    # shellcheck disable=SC2086 # the overrides are words
    run "$name" ${SWEEPS[$name]}
done
echo "== $(date -Is) done; the claims: python -m treernn report claims outputs/tables/*/{$(IFS=,; echo "${CLAIMS[*]}")}"
