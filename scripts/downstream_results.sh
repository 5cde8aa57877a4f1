#!/usr/bin/env bash
# The downstream table of docs/results.md: every task with the learned mix of the shipped biLM and with the token layer only
# (the context-independent baseline), plus the two probes. Dev sets only (the test splits are withheld).
#   EPOCHS=3 NSMC_TRAIN=10000 scripts/downstream_results.sh [OUT_DIR]   (about 20 minutes on 2 CPU cores)
#   LANGS=en ... runs only the English tasks and the probes (LANGS=ko: only the Korean tasks)
# Two heads train at once with one thread each; the mix and token runs of a task share one feature cache.
# A task that fails is named on stderr with the last lines of its log (OUT_DIR/NAME-MODE.log), and the script then
# exits 1 after the other tasks of that round; the probe tables are written whole or not at all.
set -euo pipefail
me=downstream_results.sh
out=${1:-runs/tasks}
LANGS=${LANGS:-en ko}
for lang in $LANGS; do
  case $lang in
    en|ko) ;;
    *) echo "$me: error: LANGS='$LANGS': unknown language '$lang'; give en, ko or both (LANGS='en ko')" >&2; exit 2;;
  esac
done
[ -n "${LANGS// }" ] || { echo "$me: error: LANGS is blank; give en, ko or both (LANGS='en ko')" >&2; exit 2; }
D=${DATA:-${ELMO_DATA:-../shared/data}}   # the data folder
EPOCHS=${EPOCHS:-5}
KMOU_EPOCHS=${KMOU_EPOCHS:-15}   # 2,928 training sentences: the CRF needs more passes than 3
NSMC_TRAIN=${NSMC_TRAIN:-20000}   # NSMC-rebuilt has 140,000 training reviews; a slice keeps the run short
mkdir -p "$out"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
jobs() {  # name | arguments of `elmo task train`
  cat <<JOBS
ner-conll2003|ner --format conll2003 --train $D/en/conll2003/train.txt.gz --dev $D/en/conll2003/valid.txt.gz --model en
pos-ewt|pos --format conllu --train $D/en/ud-ewt/en_ewt-ud-train.conllu.gz --dev $D/en/ud-ewt/en_ewt-ud-dev.conllu.gz --model en
sst5|classify --format sst --train $D/en/sst/trees/train.txt.gz --dev $D/en/sst/trees/dev.txt.gz --model en
nsmc|classify --format tsv --train $D/ko/nsmc/train.tsv.gz --dev $D/ko/nsmc/dev.tsv.gz --model ko --max-items $NSMC_TRAIN
pos-gsd|pos --format conllu --train $D/ko/ud-gsd/ko_gsd-ud-train.conllu.gz --dev $D/ko/ud-gsd/ko_gsd-ud-dev.conllu.gz --model ko
ner-kmou|ner --format kmou --train $D/ko/kmou-ner/ner.train.gz --dev $D/ko/kmou-ner/ner.dev.gz --model ko --epochs $KMOU_EPOCHS
JOBS
}
run() {  # $1 = input mode, $2 = "name|args"
  name=${2%%|*}; args="${2#*|} $EXTRA"
  log="$out/$name-$1.log"
  case "$args" in *--epochs*) epochs="";; *) epochs="--epochs $EPOCHS";; esac
  echo "elmo task train $args --input $1 $epochs --out $out/$name-$1 --quiet" > "$log"
  elmo task train $args --input "$1" $epochs --out "$out/$name-$1" --quiet >> "$log" 2>&1 && return
  # one write, so that the report of a task failing beside another stays in one piece
  printf '%s\n' "$me: task $name ($1) failed; the last lines of $log:" "$(tail -n 5 "$log" | sed 's/^/  /')" >&2
  return 1
}
EXTRA=${EXTRA:-}  # e.g. EXTRA="--max-items 50 --max-dev 50" for a smoke run
export -f run; export me out EPOCHS EXTRA
selected() { jobs | grep -E -- "--model ($(echo $LANGS | tr ' ' '|'))( |$)"; }
for mode in mix token; do
  if ! selected | xargs -P 2 -I{} bash -c "run $mode '{}'"; then
    echo "$me: error: tasks failed (above); their logs are in $out" >&2
    exit 1
  fi
done
if [[ " $LANGS " != *" en "* ]]; then
  for f in "$out"/*.log; do echo "== $f"; cat "$f"; done
  exit 0
fi
W2V=${W2V:-runs/w2v-en.txt}
[ -f "$W2V" ] || elmo probe word2vec runs/data/en/train.txt.gz --out "$W2V" --dim 256 --epochs 5
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2
PROBE_EXTRA=${PROBE_EXTRA:-}  # e.g. "--max-sentences 100"
tmp=
trap 'rm -f "$tmp"' EXIT   # a probe that failed or was interrupted leaves no temporary file
to_file() {  # $1 = file, the rest = a command: its output replaces the file only when it succeeds (never half a table)
  local file=$1; tmp=$(dirname "$1")/.$(basename "$1").$$.tmp; shift
  "$@" > "$tmp" || { local rc=$?; echo "$me: error: $file not written: $1 ${*:2:2} failed (exit $rc)" >&2; exit $rc; }
  mv -f "$tmp" "$file"
}
to_file "$out/probe-pos.txt" elmo probe pos --model en --train $D/en/ud-ewt/en_ewt-ud-train.conllu.gz \
  --dev $D/en/ud-ewt/en_ewt-ud-dev.conllu.gz --static "$W2V" --quiet $PROBE_EXTRA
to_file "$out/probe-wsd.txt" elmo probe wsd --model en --semcor-xml $D/en/wsd/semcor/semcor.data.xml.gz \
  --semcor-keys $D/en/wsd/semcor/semcor.gold.key.txt.gz --eval-xml $D/en/wsd/semeval2007/semeval2007.data.xml.gz \
  --eval-keys $D/en/wsd/semeval2007/semeval2007.gold.key.txt.gz --wordnet $D/en/wordnet/index.sense.gz \
  --static "$W2V" --quiet $PROBE_EXTRA
for f in "$out"/*.log; do echo "== $f"; cat "$f"; done
cat "$out/probe-pos.txt" "$out/probe-wsd.txt"
