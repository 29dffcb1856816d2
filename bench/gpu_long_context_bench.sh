#!/usr/bin/env bash
# Long context on one GPU: glm5.2-mini (no MTP layer) trained on one sequence
# of each length in SEQS (default 4k, 16k, 32k, 64k tokens), global batch 1, 3
# steps each, op times on (GLM_OP_TIMES=1: every op synchronized, so the step
# reads a little slower than unsynchronized). Prints per length the step time
# per 1k tokens, peak device memory, and the attention core's and the
# indexer's time per token from the op table: DSA's attention should stay
# flat per token from 4k on, the indexer's scoring grows with the sequence.
# Each layer is recomputed in the backward (training.recomputeActivations: 32k
# and 64k do not fit without it); RECOMPUTE=0 keeps every activation.
# Run from the repository root after `source .gpu/b/env.sh`; logs go to $1.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"
# The shipped corpus has 31k tokens, less than one 64k sequence: twelve copies
# of it, shuffled by document, make the bench's corpus.
corpus="$out/corpus.jsonl"
python3 - "$corpus" <<'PY'
import random, sys
lines = open("data/corpus/english_text.jsonl").read().splitlines()
random.seed(1234)
copies = [line for _ in range(12) for line in lines]
random.shuffle(copies)
open(sys.argv[1], "w").write("\n".join(copies) + "\n")
PY
for seq in ${SEQS:-4096 16384 32768 65536}; do
  SEQ=$seq GLOBAL_BATCH=1 STEPS=3 OURS_ONLY=1 GLM_OP_TIMES=1 DATA="$corpus" \
    RECOMPUTE=${RECOMPUTE:-1} MTP= \
    bench/gpu_train_bench.sh "$out/seq$seq" >"$out/seq$seq.txt" 2>&1
  echo "seq $seq: exit $?"
done
python3 - "$out" ${SEQS:-4096 16384 32768 65536} <<'PY'
import re, sys
out, seqs = sys.argv[1], [int(s) for s in sys.argv[2:]]
groups = {"attention": ("SparseAttentionForward", "SparseAttentionBackward",
                        "SparseAttentionKeyWeights", "LatentAttentionForward",
                        "LatentAttentionBackward"),
          "indexer top-k": ("IndexerTopK",),
          "indexer loss": ("IndexerKlLoss",)}
print("| seq | step ms | ms per 1k tokens | peak GiB | " +
      " | ".join(f"{g} us/token" for g in groups) + " |")
print("|" + " ---: |" * (4 + len(groups)))
for seq in seqs:
    try:
        log = open(f"{out}/seq{seq}/ours.worker.txt").read()
    except OSError:
        print(f"| {seq} | no run (see seq{seq}.txt) |")
        continue
    steps = re.findall(r"iteration\s+(\d+)/.*?\(ms\): (\S+) \|.*?peak memory \(MiB\): (\S+)",
                       log)
    timed = [float(ms) for it, ms, _ in steps if int(it) > 1]
    if not timed:
        print(f"| {seq} | failed (see seq{seq}/ours.glmctl.txt) |")
        continue
    step_ms = sum(timed) / len(timed)
    peak = float(steps[-1][2]) / 1024
    # Op rows: | group | calls | total | first | later mean | share | rate |
    ops = re.findall(r"^\| (\S+)[^|]* \| (\d+) \| [\d.]+ \| [\d.]+ \| ([\d.]+) \|",
                     log, re.M)
    cells = []
    for names in groups.values():
        ms = sum(int(calls) * float(mean) / len(steps)
                 for name, calls, mean in ops if name in names)
        cells.append(f"{1e3 * ms / seq:.1f}")
    print(f"| {seq} | {step_ms:.1f} | {1e3 * step_ms / seq:.1f} | {peak:.1f} | " +
          " | ".join(cells) + " |")
PY
