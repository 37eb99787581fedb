#!/usr/bin/env bash
# The whole GPU check in one call, for a machine with NVIDIA GPUs (the `device` tool runs it as
# `bash ci/device-check.sh`): builds bih with CUDA for Hopper (ninja -j16, sm_90), then runs
#   tests    the GPU tests (label gpu: kernels, pinned GEMM, emulated-on-GPU collectives, NCCL
#            communicator and fingerprint, device weights, CUDA engine, CUDA probes)
#   bench    the GEMM benchmark (invariant and tp_invariant vs cuBLAS defaults) and the decode step
#            vs the HBM floor (BENCH_FILTER: a --benchmark_filter for the first run)
#   probes   `bih probe nccl` under several NCCL_ALGO settings and `bih probe all`
#   matrix   scenarios/issue-56370-gpu.json (qwen3-1.7b on the CUDA backend), filtered by
#            MATRIX_ONLY (space-separated --only globs; default every scenario), localization on,
#            in MATRIX_JOBS shards side by side on the one GPU (default 1: one after another),
#            each scenario's requests alone on up to MATRIX_LANES engines at once (default: the
#            file's plan.solo_lanes)
#   explain  `bih explain` of the TP=4 SP ring report (the first divergent op on the GPU)
#   nccl     issue 6: `bih probe nccl` on every GPU of the machine, then
#            scenarios/issue-56370-nccl.json with real NCCL at the TP sizes in NCCL_TPS (default
#            "4 8"; TP sizes above the GPU count come out `unsupported`), filtered by NCCL_ONLY,
#            each failing cell localized; and its matrix (matrix.md) beside the emulated cells
#   engines  issue 11: bih export of qwen3-1.7b (norm weights drawn around 1) as an HF checkpoint;
#            scenarios/hf-transformers.json (HF transformers eager and sdpa beside bih's CUDA engine
#            on that checkpoint, each whole check timed); the fidelity check of bih's sampled-token
#            logprobs against an fp32 HF reference, beside HF bf16's own distance to it; HF's own
#            save_pretrained of the checkpoint, which bih must load to bitwise the same generations
#   rl       issue 17: scenarios/rl-consistency-gpu.json (every configuration against TP=1 eager of
#            its kernel family, prefill against decode, top-k and row digests) and its matrix
#   hfconfig issue 17: the export of stage engines, then only scenarios/hf-transformers-config.json
#            (HF sdpa against eager: config comparison, prefill against decode, top 5)
#   sanitize compute-sanitizer memcheck and racecheck over the CUDA kernel and engine tests
#            (SANITIZE_FILTER, default the kernels, attention, engine and emulated comm suites; each tool
#            bounded by SANITIZE_TIMEOUT seconds, default 200)
#   cpu      the CPU matrix scenarios/issue-56370.json on this host
# BIH_COMMIT names the commit the reports carry: pass the hash from the checkout that sent the tree
# (the GPU machine's copy may carry stale git metadata), e.g. BIH_COMMIT=1e280c1a2b3c.
# STAGES selects them (default "tests bench probes matrix explain"). Everything lands under $OUT
# (default out/device): summary.txt and device-results.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/device}
STAGES=${STAGES:-tests bench probes matrix explain}
MATRIX_ONLY=${MATRIX_ONLY:-}
MATRIX_JOBS=${MATRIX_JOBS:-1}
MATRIX_LANES=${MATRIX_LANES:-}
# Raw results live outside $OUT (the device tool returns few files) and are packed into
# $OUT/device-results.tgz after every stage, so a run cut short still returns what it made.
RAW=$(mktemp -d)
R="$RAW/results"
mkdir -p "$OUT" "$R"
pack() { tar -czf "$OUT/device-results.tgz" -C "$RAW" results; }
# NVLink multicast stays off on shared machines (DESIGN.md, KINDS.md).
export NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
stage() { [[ " $STAGES " == *" $1 "* ]]; }
: >"$OUT/summary.txt"

nvidia-smi >"$R/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >>"$R/nvidia-smi.txt" 2>&1
summary "gpus: $(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd, -); stages: $STAGES"

# The qwen3-1.7b HF checkpoint the engines and hfconfig stages run HF transformers on (norm
# weights drawn around 1), freshly exported to $1; the log is results/$2.log. Uses $t and $build.
export_hf_checkpoint() {
  rm -rf "$1"
  "$build/bih" export --preset qwen3-1.7b --norm-weights perturbed --format hf --out "$1" \
    >"$R/$2.log" 2>&1
  summary "export: exit $? in $(( $(date +%s) - t )) s ($(tail -1 "$R/$2.log"))"
}

build=build-device
start=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIH_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DBIH_BUILD_BENCH=ON >"$R/configure.log" 2>&1 ||
   ! cmake --build "$build" -j16 --target bih bih_gpu_tests bih_cuda_bench >"$R/build.log" 2>&1; then
  summary "BUILD FAILED (see results/configure.log, results/build.log)"
  grep -E "error|Error" "$R/build.log" | head -40
  tail -30 "$R/configure.log" 2>/dev/null
  pack
  exit 1
fi
summary "build: $(( $(date +%s) - start )) s"

if stage tests; then
  t=$(date +%s)
  # On this machine a missing GPU or a CUDA error fails a test instead of skipping it; only
  # "needs N GPUs" stays a skip (tests/gpu/gpu_test_util.hpp).
  BIH_REQUIRE_GPU=1 "$build/bih_gpu_tests" ${GTEST_FILTER:+--gtest_filter="$GTEST_FILTER"} \
    --gtest_output="json:$R/gpu-tests.json" >"$R/gpu-tests.log" 2>&1
  summary "gpu tests: exit $? in $(( $(date +%s) - t )) s ($(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/gpu-tests.log" | paste -sd';' -))"
  grep -E '^\[  FAILED  \]|Failure|error:' "$R/gpu-tests.log" | head -40
  # The step chain again with every GEMM letting the kernel after it start as it starts, so that
  # every kernel's wait for the one before it is exercised (models/cuda/programmatic_launch.cuh).
  BIH_STEP_PDL=2 BIH_REQUIRE_GPU=1 "$build/bih_gpu_tests" --gtest_filter='CudaStepChain.*' \
    >"$R/gpu-tests-step-pdl2.log" 2>&1
  summary "step chain, BIH_STEP_PDL=2: exit $? ($(grep -E '^\[  (PASSED|FAILED) ' "$R/gpu-tests-step-pdl2.log" | paste -sd';' -))"
  # Skips by reason. Debian's gtest writes no skip message into its JSON, so the reason is read
  # from the log: the line after "file:line: Skipped" within each test's RUN block.
  python3 - "$R/gpu-tests.log" <<'PY' | tee -a "$OUT/summary.txt"
import collections, re, sys
reasons = collections.defaultdict(list)
test, reason = None, None
lines = open(sys.argv[1], errors="replace").read().splitlines()
for i, line in enumerate(lines):
    if line.startswith("[ RUN      ] "):
        test, reason = line[13:].strip(), None
    elif line.endswith(": Skipped") and i + 1 < len(lines):
        reason = lines[i + 1].strip() or "(no reason given)"
    elif line.startswith("[  SKIPPED ] ") and test and line[13:].startswith(test):
        reasons[reason or "(no reason given)"].append(test)
        test = None
print(f"gpu test skips: {sum(len(v) for v in reasons.values())}")
for reason, tests in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
    print(f"  {len(tests)} x {reason}: {', '.join(tests[:6])}{' ...' if len(tests) > 6 else ''}")
PY
  pack
fi

if stage bench; then
  t=$(date +%s)
  "$build/bih_cuda_bench" ${BENCH_FILTER:+--benchmark_filter="$BENCH_FILTER"} \
    --benchmark_out="$R/bench-cuda.json" --benchmark_out_format=json >"$R/bench-cuda.txt" 2>&1
  summary "cuda bench: exit $? in $(( $(date +%s) - t )) s"
  grep -E "^BM_" "$R/bench-cuda.txt" | head -60
  grep -E "^\[step\]" "$R/bench-cuda.txt" | tee -a "$OUT/summary.txt"
  cp "$R/bench-cuda.txt" "$OUT/bench-cuda.txt"
  if [ -z "${BENCH_FILTER:-}" ]; then  # a filtered run is a quick look: no second pass
    # The invariant GEMM without its companion configurations (the pinned reference for every M).
    "$build/bih_cuda_bench" --companions=0 --benchmark_filter=Gemm >"$R/bench-gemm-no-companions.txt" 2>&1
    summary "gemm bench without companions: exit $?"
    # Where an eager decode step's GPU time goes, op by op (the events add a little time).
    BIH_CUDA_PROFILE=1 "$build/bih_cuda_bench" --benchmark_filter='DecodeStep.*graph:none' \
      >"$R/bench-decode-profile.txt" 2>&1
    summary "decode step profile: exit $?"
    grep -A16 "GPU time of" "$R/bench-decode-profile.txt" | head -40
  fi
  pack
fi

if stage probes; then
  for algo in default allreduce:ring allreduce:tree; do
    name=${algo//:/-}
    if [ "$algo" = default ]; then
      "$build/bih" probe nccl --json "$R/probe-nccl-$name.json" >"$R/probe-nccl-$name.txt" 2>&1
    else
      NCCL_ALGO=$algo "$build/bih" probe nccl --json "$R/probe-nccl-$name.json" \
        >"$R/probe-nccl-$name.txt" 2>&1
    fi
    summary "probe nccl ($algo): exit $?"
  done
  t=$(date +%s)
  "$build/bih" probe all --json "$R/probe-all.json" >"$R/probe-all.txt" 2>&1
  summary "probe all: exit $? in $(( $(date +%s) - t )) s ($(tail -1 "$R/probe-all.txt"))"
  grep -E "✗|variant.*expect" "$R/probe-all.txt" | head -20
  pack
fi

if stage rl; then
  t=$(date +%s)
  "$build/bih" run scenarios/rl-consistency-gpu.json --out "$R/rl-consistency-gpu" \
    >"$R/rl-consistency-gpu.txt" 2>"$R/rl-consistency-gpu.log"
  summary "rl-consistency-gpu: exit $? in $(( $(date +%s) - t )) s"
  tail -n 3 "$R/rl-consistency-gpu.txt" | tee -a "$OUT/summary.txt"
  cp "$R/rl-consistency-gpu.txt" "$OUT/rl-consistency-gpu.txt"
  "$build/bih" matrix "$R/rl-consistency-gpu" --format md --out "$R/rl-consistency-gpu-matrix" \
    >/dev/null 2>&1 && cp "$R/rl-consistency-gpu-matrix/matrix.md" "$OUT/rl-consistency-gpu.md"
  pack
fi

if stage matrix; then
  t=$(date +%s)
  only=()
  set -f  # the filters are bih globs, not file names
  for f in $MATRIX_ONLY; do only+=(--only "$f"); done
  set +f
  # MATRIX_LANES=N: the requests alone on up to N engines at once (plan.solo_lanes).
  lanes=()
  [[ -n $MATRIX_LANES ]] && lanes=(--set "plan.solo_lanes=$MATRIX_LANES")
  # Shard I of MATRIX_JOBS runs into its own folder (each --out is locked by its run); the gate
  # and `bih matrix` read all the folders.
  matrix_dirs=()
  : >"$R/issue-56370-gpu.txt"
  for ((i = 1; i <= MATRIX_JOBS; i++)); do
    matrix_dirs+=("$R/issue-56370-gpu/shard-$i")
    "$build/bih" run scenarios/issue-56370-gpu.json "${only[@]}" "${lanes[@]}" \
      --shard "$i/$MATRIX_JOBS" --set localize=true --out "$R/issue-56370-gpu/shard-$i" \
      >"$R/issue-56370-gpu-$i.txt" 2>&1 &
  done
  matrix_exit=0
  for ((i = 1; i <= MATRIX_JOBS; i++)); do wait -n || matrix_exit=$?; done
  cat "$R"/issue-56370-gpu-*.txt >>"$R/issue-56370-gpu.txt"
  summary "issue-56370-gpu: exit $matrix_exit in $(( $(date +%s) - t )) s ($MATRIX_JOBS side by side; $(grep -h 'scenario(s) in' "$R"/issue-56370-gpu-*.txt | paste -sd';' -))"
  # One rule for what cannot run here (issue 19): on one GPU the TP=2 NCCL cells are
  # `unsupported`, counted as not checked on this machine and JUnit <skipped> with the reason,
  # and the gate passes; from two GPUs on every cell of the file can run, so --require-all makes
  # one that did not (NCCL missing, a GPU not visible) fail, and a regressed TP=2 cell fails as
  # any regression does.
  gate_strict=()
  [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ] && gate_strict=(--require-all)
  "$build/bih" gate --expect ci/expectations-gpu.json "${matrix_dirs[@]}" "${gate_strict[@]}" \
    --junit "$R/gate-gpu.xml" >"$R/gate-gpu.txt" 2>&1
  summary "gate against ci/expectations-gpu.json${gate_strict[*]:+ (${gate_strict[*]})}: exit $? ($(tail -1 "$R/gate-gpu.txt"))"
  grep -E "not checked on this machine|^FAIL" "$R/gate-gpu.txt" | head -10
  summary "junit: $(grep -c '<testcase' "$R/gate-gpu.xml" 2>/dev/null) cases, $(grep -c '<skipped' "$R/gate-gpu.xml" 2>/dev/null) skipped, $(grep -c '<failure' "$R/gate-gpu.xml" 2>/dev/null) failed"
  grep -vE "^\[|^ *(step|fresh)" "$R/issue-56370-gpu.txt" | tail -40
  pack
fi

if stage explain; then
  report=$(ls "$R"/issue-56370-gpu/shard-*/*tp=4,sp=on*rs=ring*graph=none*prefix=off*.json 2>/dev/null | head -1)
  if [ -n "$report" ]; then
    t=$(date +%s.%N)
    "$build/bih" explain "$report" >"$R/explain-tp4-sp-ring.txt" 2>&1
    summary "explain tp4 sp ring (GPU): exit $? in $(python3 -c "import time; print(round(time.time() - $t, 2))") s ($(grep -h 're-run times' "$R/explain-tp4-sp-ring.txt"))"
    head -30 "$R/explain-tp4-sp-ring.txt"
  else
    summary "explain: no TP=4 SP ring report to explain (matrix stage filtered it out)"
  fi
fi

if stage nccl; then
  t=$(date +%s)
  "$build/bih" probe nccl --json "$R/probe-nccl-all-gpus.json" >"$R/probe-nccl-all-gpus.txt" 2>&1
  summary "probe nccl on $(nvidia-smi -L | wc -l) GPUs: exit $?"
  tps=$(echo "${NCCL_TPS:-4 8}" | tr ' ' ',')
  sed "s/\"parallel.tp\": \[4, 8\]/\"parallel.tp\": [$tps]/" scenarios/issue-56370-nccl.json \
    >"$RAW/issue-56370-nccl.json"
  only=()
  set -f
  for f in ${NCCL_ONLY:-}; do only+=(--only "$f"); done
  set +f
  "$build/bih" run "$RAW/issue-56370-nccl.json" "${only[@]}" --out "$R/issue-56370-nccl" \
    >"$R/issue-56370-nccl.txt" 2>&1
  summary "issue-56370-nccl (tp $tps): exit $? in $(( $(date +%s) - t )) s"
  "$build/bih" run "$RAW/issue-56370-nccl.json" "${only[@]}" --set parallel.ranks=emulated \
    --set localize=false --out "$R/issue-56370-nccl" >"$R/issue-56370-nccl-emulated.txt" 2>&1
  summary "the same cells emulated: exit $?"
  "$build/bih" matrix "$R/issue-56370-nccl" --out "$R/issue-56370-nccl" --format md \
    --rows parallel.tp,parallel.ranks,sequence_parallel.enabled,sequence_parallel.min_tokens,collectives.reduce_scatter \
    --title "issue 56370: real NCCL beside emulation" >/dev/null 2>&1
  grep -vE "^\[|^ *(step|fresh)" "$R/issue-56370-nccl.txt" | tail -30
  pack
fi

if stage sanitize; then
  # The emulated comm's hub kernels too; its test of a bad device makes an API error on purpose.
  filter=${SANITIZE_FILTER:-CudaKernels*:CudaAttentionReference*:CudaEngine*:CudaGemm.SkinnyStreamSmall*:CudaSiluMulFusion.SmallShapes*:EmulatedGpuCommTest.*-EmulatedGpuCommTest.RejectsBadConstructionAndRanks}
  for tool in memcheck racecheck; do
    t=$(date +%s)
    timeout "${SANITIZE_TIMEOUT:-200}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      --print-limit 20 "$build/bih_gpu_tests" --gtest_filter="$filter" \
      >"$R/sanitize-$tool.log" 2>&1
    code=$?
    summary "compute-sanitizer $tool ($filter): exit $code in $(( $(date +%s) - t )) s; $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$R/sanitize-$tool.log" | tail -1); $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/sanitize-$tool.log" | paste -sd';' -)"
    [ $code -eq 124 ] && summary "  ($tool stopped at its time bound: the tests it finished are in the log)"
    grep -E "^========= (Invalid|Race|Error|Program hit)" "$R/sanitize-$tool.log" | sort | uniq -c | head -10
  done
  pack
fi

if stage engines; then
  t=$(date +%s)
  ckpt=out/models/qwen3-1.7b-hf
  export_hf_checkpoint "$ckpt" engines-export
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
    >"$R/engines-versions.txt" 2>&1
  summary "$(cat "$R/engines-versions.txt")"
  t=$(date +%s)
  PYTHONUNBUFFERED=1 BIH_CACHE_DIR="$RAW/cache" "$build/bih" run scenarios/hf-transformers.json \
    --out "$R/engines" --keep-work >"$R/engines-run.txt" 2>"$R/engines-run.log"
  summary "hf-transformers.json: exit $? in $(( $(date +%s) - t )) s"
  cat "$R/engines-run.txt" | tee -a "$OUT/summary.txt"
  grep -E " -> (error|unsupported)" "$R/engines-run.log" | head -5
  pack
  t=$(date +%s)
  PYTHONUNBUFFERED=1 BIH_CACHE_DIR="$RAW/cache" "$build/bih" run scenarios/hf-transformers-config.json \
    --out "$R/engines-config" >"$R/engines-config.txt" 2>"$R/engines-config.log"
  summary "hf-transformers-config.json (sdpa against eager): exit $? in $(( $(date +%s) - t )) s"
  cat "$R/engines-config.txt" | tee -a "$OUT/summary.txt"
  pack
  bih_work=$(ls -d "$R"/engines/work/tp=1,* 2>/dev/null | head -1)
  t=$(date +%s)
  python3 adapters/hf-transformers/fidelity.py "$ckpt" "$bih_work/gen-bs_1.json" \
    --out "$R/fidelity.json" >"$R/fidelity.txt" 2>&1
  summary "fidelity (bih bs=1 vs fp32 HF, beside HF bf16): exit $? in $(( $(date +%s) - t )) s"
  cat "$R/fidelity.txt" | tail -12 | tee -a "$OUT/summary.txt"
  pack
  t=$(date +%s)
  python3 adapters/hf-transformers/fidelity.py "$ckpt" --save-pretrained "$RAW/hf-save" \
    >"$R/hf-save.log" 2>&1
  summary "HF save_pretrained of bih's export: exit $?; config: $(head -c 300 "$RAW/hf-save/config.json" | tr -d '\n ')"
  "$build/bih" run scenarios/hf-transformers.json --only '*backend=cuda*' \
    --set model.path="$(realpath "$RAW/hf-save")" --out "$R/engines-hf-save" --keep-work \
    >"$R/engines-hf-save.txt" 2>"$R/engines-hf-save.log"
  summary "bih on HF's own save: exit $?"
  save_work=$(ls -d "$R"/engines-hf-save/work/tp=1,* 2>/dev/null | head -1)
  for g in gen-bs_1.json gen-bs_64.json; do
    "$build/bih" diff "$bih_work/$g" "$save_work/$g" >"$R/hf-save-diff-$g.txt" 2>&1
    summary "bih on bih's export vs on HF's save, $g: exit $? ($(head -1 "$R/hf-save-diff-$g.txt"))"
  done
  pack
fi

if stage hfconfig; then
  t=$(date +%s)
  ckpt=out/models/qwen3-1.7b-hf
  export_hf_checkpoint "$ckpt" hfconfig-export
  t=$(date +%s)
  PYTHONUNBUFFERED=1 BIH_CACHE_DIR="$RAW/cache" "$build/bih" run scenarios/hf-transformers-config.json \
    --out "$R/hfconfig" >"$R/hfconfig.txt" 2>"$R/hfconfig.log"
  summary "hf-transformers-config.json (sdpa against eager): exit $? in $(( $(date +%s) - t )) s"
  cat "$R/hfconfig.txt" | tee -a "$OUT/summary.txt"
  tail -5 "$R/hfconfig.log"
  "$build/bih" matrix "$R/hfconfig" --format md --out "$R/hfconfig-matrix" >/dev/null 2>&1 &&
    cp "$R/hfconfig-matrix/matrix.md" "$OUT/hf-transformers-config.md"
  pack
fi

if stage cpu; then
  "$build/bih" run scenarios/issue-56370.json --out "$R/issue-56370" >"$R/issue-56370.txt" 2>&1
  summary "issue-56370 (CPU engine on this host): exit $? ($(tail -2 "$R/issue-56370.txt" | head -1))"
fi

pack
echo "-----"
cat "$OUT/summary.txt"
