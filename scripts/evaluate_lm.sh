#!/usr/bin/env bash
# Held-out perplexity of a trained LM on the English evaluation sets, and the count-based baselines trained on the
# same training text with the same vocabulary. Per set: state carried (as in training), then each sentence from
# zeros (as embedding reads it). Usage: scripts/evaluate_lm.sh RUN_DIR [DATA_DIR]
set -euo pipefail
run=$1
data=${2:-runs/data/en}
# The sets are already tokenised (prepare_english.py), so they are split on spaces, as the baselines split them: a
# model that records the en tokenizer (one made with --init-from en) would otherwise re-split them (WikiText's <unk>
# -> < unk >) and its figures would not compare with the cards' (1B dev: 322,706 predictions).
for f in 1b-dev.txt wikitext2-valid.txt heldout-nlp.txt; do
  echo "== $f"
  elmo perplexity "$run" "$data/$f" --quiet --tokenize whitespace
  elmo perplexity "$run" "$data/$f" --quiet --tokenize whitespace --zero-state
done
echo "== baselines (trained on $data/train.txt.gz)"
elmo baselines "$data/vocab.txt" --train "$data/train.txt.gz" --eval "$data/1b-dev.txt" "$data/wikitext2-valid.txt" "$data/heldout-nlp.txt"
