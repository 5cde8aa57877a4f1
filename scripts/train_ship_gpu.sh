#!/usr/bin/env bash
# Train the shipped English and Korean models side by side on one GPU, measure their held-out perplexity and
# write elmo/models/{en,ko} (float16 weights + model card), all in one command for a lent GPU machine (about
# 9 minutes with MINUTES=7). Not yet run on a GPU: its CUDA-only code paths were checked on the CPU with bf16
# autocast, and DEVICE=cpu CONFIG=tiny runs the whole pipeline.
# Usage, from the repository root:
#
#   scripts/train_ship_gpu.sh DATA MINUTES OUT
#
# DATA holds en-train.txt.xz, ko-train.txt.xz (runs/data/{en,ko}/train.txt.gz recompressed), en-vocab.txt,
# ko-vocab.txt, the held-out files xz-compressed (1b-dev.txt.xz wikitext2-valid.txt.xz heldout-nlp.txt.xz
# heldout-nsmc.txt.xz, as made by scripts/prepare_{english,korean}.py), baselines-{en,ko}.txt (the output of `elmo baselines`, see
# scripts/evaluate_lm.sh) and {en,ko}-{use,data,tok,limits}.md (the card's intended use, training data,
# tokenisation and limitations paragraphs).
# MINUTES: training time of each model; OUT: logs, metrics and evaluation reports. Environment: DEVICE (cuda),
# CONFIG (ship-cpu), BATCH (256 rows), PYTHON (python3); DEVICE=cpu CONFIG=tiny runs the whole pipeline as a check.
# It trains from scratch and overwrites elmo/models/{en,ko}: keep the result only if OUT/{en,ko}-eval.txt beat the
# models already shipped (their cards: CPU-trained en 1B dev 207.6, ko NSMC 167.7, carried-state figures at
# --batch-size 64, where this script measures at 128: compare the from-zeros figures, which do not depend on it).
# A failed training or evaluation step (a background job included) stops the script with a non-zero exit before
# elmo/models is touched. The two models are then shipped one after the other, each folder written whole by
# ship_model.py: a refused Korean report leaves the English model already replaced (see OUT/ko-ship.log).
set -Eeuo pipefail
if [ $# -ne 3 ]; then echo "usage: scripts/train_ship_gpu.sh DATA MINUTES OUT" >&2; exit 2; fi
data=$1 minutes=$2 out=$3
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3} device=${DEVICE:-cuda} config=${CONFIG:-ship-cpu} batch=${BATCH:-256}
needed="en-train.txt.xz ko-train.txt.xz en-vocab.txt ko-vocab.txt 1b-dev.txt.xz wikitext2-valid.txt.xz
        heldout-nlp.txt.xz heldout-nsmc.txt.xz baselines-en.txt baselines-ko.txt"
for name in $needed {en,ko}-{use,data,tok,limits}.md; do
  if [ ! -f "$data/$name" ]; then echo "train_ship_gpu.sh: error: $data/$name is missing (see the header)" >&2; exit 1; fi
done
for lang in en ko; do
  if [ -e "runs/$lang-gpu" ]; then
    echo "train_ship_gpu.sh: error: runs/$lang-gpu exists (an earlier run): move it away, or this run would ship it" >&2
    exit 1
  fi
done
mkdir -p "$out" runs
exec 3>&2  # the terminal's stderr, for the line below also from a step whose output goes to its log
trap 'echo "train_ship_gpu.sh: error: a step failed (line $LINENO); its log is in $out; nothing more was shipped" >&3' ERR

wait_all() {  # pids: wait for each background job; fail if any failed
  local failed=0
  for pid in "$@"; do wait "$pid" || failed=1; done
  return $failed
}
if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"; fi

pids=()
for f in "$data"/*.xz; do  # every text travels xz-compressed (the transfer to the GPU machine is size-limited)
  $py -c "import lzma, shutil, sys
try: shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))
except (OSError, EOFError, lzma.LZMAError) as err: sys.exit(f'{sys.argv[1]}: cannot decompress ({err})')" \
      "$f" "runs/$(basename "$f" .xz)" &
  pids+=($!)
done
wait_all "${pids[@]}"

train() {  # lang
  $py -m elmo train "runs/$1-train.txt" --config "$config" --vocab "$data/$1-vocab.txt" --out "runs/$1-gpu" \
      --batch-size "$batch" --max-minutes "$minutes" --checkpoint-every 2000 --device "$device" --quiet
}
train en > "$out/en-train.log" 2>&1 & en=$!
train ko > "$out/ko-train.log" 2>&1 & ko=$!
wait_all $en $ko
cp runs/en-gpu/metrics.jsonl "$out/en-metrics.jsonl"; cp runs/ko-gpu/metrics.jsonl "$out/ko-metrics.jsonl"

evaluate() {  # lang files...
  local lang=$1; shift
  for f in "$@"; do
    echo "== $f"
    $py -m elmo perplexity "runs/$lang-gpu" "runs/$f" --device "$device" --batch-size 128 --quiet --tokenize whitespace
    $py -m elmo perplexity "runs/$lang-gpu" "runs/$f" --device "$device" --quiet --tokenize whitespace --zero-state  # as embedding reads
  done
  echo "== baselines (trained on $lang-train.txt, the same text: $data/baselines-$lang.txt)"
  cat "$data/baselines-$lang.txt"
}
evaluate en 1b-dev.txt wikitext2-valid.txt heldout-nlp.txt > "$out/en-eval.txt" 2>&1 & en=$!
evaluate ko heldout-nsmc.txt > "$out/ko-eval.txt" 2>&1 & ko=$!
wait_all $en $ko

if [ "$device" = cuda ]; then
  hardware=${HARDWARE:-"one NVIDIA H200 GPU (lent for one run; the English and the Korean model trained side by side, bf16 autocast)"}
else
  hardware=${HARDWARE:-"the $device device (DEVICE=$device)"}
fi
ship() {  # lang
  $py scripts/ship_model.py "runs/$1-gpu" --name "$1" --tokenizer "$1" --eval-report "$out/$1-eval.txt" \
      --intended-use "$(cat "$data/$1-use.md")" --data "$(cat "$data/$1-data.md")" \
      --tokenisation "$(cat "$data/$1-tok.md")" --limitations "$(cat "$data/$1-limits.md")" --hardware "$hardware" \
      --train-command "scripts/train_ship_gpu.sh DATA $minutes OUT   # runs: elmo train runs/$1-train.txt --config $config --vocab $1-vocab.txt --batch-size $batch --max-minutes $minutes --device $device" \
      --eval-command "elmo perplexity runs/$1-gpu FILE --device $device --tokenize whitespace --batch-size 128; elmo perplexity runs/$1-gpu FILE --device $device --tokenize whitespace --zero-state; elmo baselines (scripts/evaluate_lm.sh)"
}
ship en > "$out/en-ship.log" 2>&1
ship ko > "$out/ko-ship.log" 2>&1
tail -n 3 "$out"/*.log "$out"/*-eval.txt
