#!/usr/bin/env bash
# data/get_fineweb.sh: FineWeb sample-10BT (~10B GPT-2 tokens of English web text, the corpus of the Prism
# paper and of llm.c's GPT-2 runs), tokenized into data/fineweb10B/, where train_prism finds it by default.
#
# Downloads the parquet files of HuggingFaceFW/fineweb, sample/10BT/ (000_00000.parquet, 001_00000.parquet,
# ... until the first that does not exist; ~30 GB) from huggingface.co into data/cache/fineweb10B/ (resumable:
# curl -C -), streams their `text` column as JSON Lines into build/prepare_shards, and writes
# data/fineweb10B/fineweb_val_000000.bin (the first 100M tokens, as llm.c's split) and fineweb_train_*.bin
# (100M tokens each), in data/fineweb10B.tmp/ renamed into place when complete (train_prism never sees half of
# it). Each parquet file is deleted once read unless KEEP_PARQUET=1.
# Needs: internet access to huggingface.co, curl, python3 with pyarrow (pip install pyarrow), ~20 GB for the
# shards plus one parquet file at a time. Takes about an hour on 16 cores (tokenizing is the slow part).
# Usage: bash data/get_fineweb.sh           (idempotent: does nothing when the shards are there)
#        FINEWEB_FILES=2 bash data/get_fineweb.sh   (only the first 2 files: ~1.4B tokens, for a quick look)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/data/fineweb10B"
cache="$root/data/cache/fineweb10B"
url="https://huggingface.co/datasets/HuggingFaceFW/fineweb/resolve/main/sample/10BT"
say() { echo "get_fineweb: $*"; }
die() { echo "get_fineweb: error: $*" >&2; exit 1; }

if [[ -s "$out/fineweb_val_000000.bin" ]]; then
    say "$out already holds the FineWeb shards"
    exit 0
fi
command -v curl >/dev/null 2>&1 || die "curl not found; install it (apt-get install curl) and rerun"
python3 -c 'import pyarrow.parquet' 2>/dev/null || die "python3 cannot import pyarrow; pip install pyarrow, then rerun"
make -C "$root" --no-print-directory build/prepare_shards >/dev/null
rm -rf "$out.tmp"  # an interrupted run starts over
mkdir -p "$cache" "$out.tmp"

# The file names, downloaded one at a time just before they are read.
fetch() {  # fetch NAME -> path on stdout, or nothing when the file does not exist
    local name=$1 dst="$cache/$1"
    if [[ ! -s "$dst.done" ]]; then
        say "downloading $name" >&2
        if ! curl -fL --retry 5 -C - -o "$dst" "$url/$name?download=true" 2>/dev/null; then
            rm -f "$dst"
            return 0
        fi
        echo ok > "$dst.done"
    fi
    echo "$dst"
}

stream() {  # every document of every file, as {"text": ...} lines
    local i=0 max=${FINEWEB_FILES:-1000}
    while ((i < max)); do
        local f
        f=$(fetch "$(printf '%03d_00000.parquet' "$i")")
        [[ -n "$f" ]] || break
        python3 -c 'import sys, json, pyarrow.parquet as pq
for b in pq.ParquetFile(sys.argv[1]).iter_batches(columns=["text"]):
    for t in b.column(0).to_pylist(): print(json.dumps({"text": t}))' "$f"
        [[ "${KEEP_PARQUET:-0}" == 1 ]] || rm -f "$f" "$f.done"
        i=$((i + 1))
    done
    ((i > 0)) || die "no file could be downloaded from $url; check access to huggingface.co"
}

stream | "$root/build/prepare_shards" -o "$out.tmp/fineweb" --val-tokens 100000000 --shard-tokens 100000000 -
rmdir "$out" 2>/dev/null || true
[[ ! -e "$out" ]] || die "$out exists without fineweb_val_000000.bin; move it away, then rerun"
mv "$out.tmp" "$out"
say "done: $(ls "$out" | wc -l) shards in $out; train with ./train_prism (it uses data/fineweb10B/ when present)"
