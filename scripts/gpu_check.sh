#!/usr/bin/env bash
# The GPU checks behind docs/gpu.md in one command, for a CUDA machine with no internet.
#
#   bash scripts/gpu_check.sh OUTDIR STEP...
#
# Steps, each with its own time limit (seconds, from the environment) so that a slow step never takes the
# files of the others with it; each writes into OUTDIR as it goes:
#   env      what ran: GPU, driver, torch, spanviz version and commit          -> env.txt
#   tests    the CUDA-only tests (pytest -m gpu)                              -> gpu_tests.log    (GPU_TESTS_S, 200)
#   profile  scripts/gpu_profile.py, parts in GPU_PROFILE_PARTS              -> gpu_profile.json (GPU_PROFILE_S, 150)
#   bench    spanviz bench --json on cuda, sections in GPU_BENCH_ONLY         -> bench_gpu.json   (GPU_BENCH_S, 240)
#            (GPU_BENCH_ARGS: more options, e.g. --quick)
#
# The data: a WikiText-2 folder in SPANVIZ_WIKITEXT_DIR (the offline copy's validation and test splits do).
# Python packages the machine lacks can be given as wheels in WHEELS_DIR (installed into /tmp/site first).
set -uo pipefail
out=${1:?usage: bash scripts/gpu_check.sh OUTDIR STEP...}
shift
mkdir -p "$out"
exec 3>&1  # the steps' progress lines; each step's own output goes to its files
export PYTHONUNBUFFERED=1 SPANVIZ_HOME=${SPANVIZ_HOME:-/tmp/spanviz-home}
if [[ -n "${WHEELS_DIR:-}" ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEELS_DIR"/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi

run_step() {  # name, limit, command...: the step's own log, its exit status and seconds on the last lines
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    echo "== $name (limit ${limit} s)" >&3
    timeout -k 10 "$limit" "$@"
    rc=$?
    echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$out/steps.txt" >&3
}

for step in "$@"; do
    case $step in
        env)
            run_step env 60 bash -c 'nvidia-smi; python3 -c "
import torch, spanviz.provenance as p
print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name())
print(p.code_identity())
"' >"$out/env.txt" 2>&1 ;;
        tests)
            # -v: each test's line is in the log as it ends (a step cut at its limit still says which passed);
            # GPU_TESTS_K selects (pytest -k), e.g. the tests a change touched
            run_step tests "${GPU_TESTS_S:-200}" python3 -m pytest -v -m gpu -p no:cacheprovider -rs --durations=0 \
                ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} tests/test_gpu.py tests/test_local_global.py tests/test_fp8.py \
                >"$out/gpu_tests.log" 2>&1 ;;
        profile)
            # shellcheck disable=SC2086
            run_step profile "${GPU_PROFILE_S:-150}" python3 scripts/gpu_profile.py --out "$out/gpu_profile.json" \
                --parts ${GPU_PROFILE_PARTS:-wrapper model spans curve} >"$out/gpu_profile.txt" 2>&1 ;;
        bench)
            # --out rewrites the JSON after every section: a step cut at its limit keeps the finished ones
            # shellcheck disable=SC2086
            run_step bench "${GPU_BENCH_S:-240}" python3 -m spanviz bench --json --device cuda ${GPU_BENCH_ARGS:-} \
                --only "${GPU_BENCH_ONLY:-ls,spans,fp8}" --out "$out/bench_gpu.json" >"$out/bench_gpu.log" 2>&1 ;;
        *)
            echo "unknown step '$step': use env, tests, profile, bench" >&2
            exit 2 ;;
    esac
done
