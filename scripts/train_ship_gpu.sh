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
# models already shipped (their cards: CPU-trained en 1B dev 207.6, ko NSMC 167.7).
set -uo pipefail
data=$1 minutes=$2 out=$3
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3} device=${DEVICE:-cuda} config=${CONFIG:-ship-cpu} batch=${BATCH:-256}
mkdir -p "$out" runs
if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"; fi

for f in "$data"/*.xz; do  # every text travels xz-compressed (the transfer to the GPU machine is size-limited)
  $py -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
      "$f" "runs/$(basename "$f" .xz)" &
done
wait

train() {  # lang
  $py -m elmo train "runs/$1-train.txt" --config "$config" --vocab "$data/$1-vocab.txt" --out "runs/$1-gpu" \
      --batch-size "$batch" --max-minutes "$minutes" --checkpoint-every 2000 --device "$device" --quiet
}
train en > "$out/en-train.log" 2>&1 &
train ko > "$out/ko-train.log" 2>&1 &
wait
cp runs/en-gpu/metrics.jsonl "$out/en-metrics.jsonl"; cp runs/ko-gpu/metrics.jsonl "$out/ko-metrics.jsonl"

evaluate() {  # lang files...
  local lang=$1; shift
  for f in "$@"; do
    echo "== $f"
    $py -m elmo perplexity "runs/$lang-gpu" "runs/$f" --device "$device" --batch-size 128 --quiet --tokenize whitespace
    $py -m elmo perplexity "runs/$lang-gpu" "runs/$f" --device "$device" --quiet --tokenize whitespace --zero-state  # as embedding reads
  done
  echo "== baselines (trained on runs/data/$lang/train.txt.gz, the same text)"
  cat "$data/baselines-$lang.txt"
}
evaluate en 1b-dev.txt wikitext2-valid.txt heldout-nlp.txt > "$out/en-eval.txt" 2>&1 &
evaluate ko heldout-nsmc.txt > "$out/ko-eval.txt" 2>&1 &
wait

hardware=${HARDWARE:-"one NVIDIA H200 GPU (lent for one run; the English and the Korean model trained side by side, bf16 autocast)"}
ship() {  # lang
  $py scripts/ship_model.py "runs/$1-gpu" --name "$1" --eval-report "$out/$1-eval.txt" \
      --intended-use "$(cat "$data/$1-use.md")" --data "$(cat "$data/$1-data.md")" \
      --tokenisation "$(cat "$data/$1-tok.md")" --limitations "$(cat "$data/$1-limits.md")" --hardware "$hardware" \
      --train-command "scripts/train_ship_gpu.sh DATA $minutes OUT   # runs: elmo train runs/$1-train.txt --config $config --vocab $1-vocab.txt --batch-size $batch --max-minutes $minutes --device $device" \
      --eval-command "elmo perplexity runs/$1-gpu FILE --device $device [--zero-state]; elmo baselines (scripts/evaluate_lm.sh)"
}
ship en > "$out/en-ship.log" 2>&1
ship ko > "$out/ko-ship.log" 2>&1
tail -n 3 "$out"/*.log "$out"/*-eval.txt
