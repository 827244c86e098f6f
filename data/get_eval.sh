#!/usr/bin/env bash
# data/get_eval.sh: download the official zero-shot eval files and convert them into data/eval/TASK.bin.
#
#   bash data/get_eval.sh                       # all six: hellaswag piqa arc_easy winogrande lambada wikitext
#   bash data/get_eval.sh hellaswag piqa        # only these
#
# Sources (the files lm-evaluation-harness's datasets are built from; licences in docs/zero_shot.md):
#   hellaswag   hellaswag_val.jsonl               github.com/rowanz/hellaswag (data/)
#   piqa        valid.jsonl + valid-labels.lst    yonatanbisk.com/piqa/data (mirror: github.com/ybisk/ybisk.github.io)
#   arc_easy    ARC-Easy-Test.jsonl               AI2's ARC-V1-Feb2018.zip
#   winogrande  dev.jsonl (winogrande_xl validation)  AI2's winogrande_1.1.zip
#   lambada     lambada_test.jsonl                OpenAI's GPT-2 release (the "lambada_openai" variant)
#   wikitext    wiki.test.raw                     wikitext-2-raw-v1.zip (Salesforce / S. Merity)
# Raw files go to data/eval/raw/, eval files to data/eval/ (both git-ignored: nothing downloaded is committed).
# Idempotent: a raw file already present is not downloaded again, an eval file newer than its inputs and the
# converter is not rebuilt. Each failure prints one line naming the file; the others still proceed, and the
# script exits 1 at the end if any failed. Needs curl or wget (or python3), make and a C++ compiler.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/data/eval"
raw="$out/raw"
mkdir -p "$raw"
failed=0
err() { echo "get_eval: error: $*" >&2; failed=1; }

# fetch DEST URL...: the first URL that works, written atomically (DEST.part, then renamed).
fetch() {
    local dest="$1"; shift
    [[ -s "$dest" ]] && return 0
    local url
    for url in "$@"; do
        rm -f "$dest.part"
        if command -v curl >/dev/null 2>&1; then
            curl -fsSL --retry 3 --connect-timeout 20 -o "$dest.part" "$url" 2>/dev/null
        elif command -v wget >/dev/null 2>&1; then
            wget -q --tries=3 --timeout=20 -O "$dest.part" "$url"
        else
            python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$dest.part" 2>/dev/null
        fi
        if [[ $? -eq 0 && -s "$dest.part" ]]; then mv "$dest.part" "$dest"; return 0; fi
    done
    rm -f "$dest.part"
    err "$(basename "$dest"): download failed from $* (no network? put the file at $dest yourself and rerun)"
    return 1
}

# unpack ZIP MEMBER DEST: one member of a zip archive (python3's zipfile, so `unzip` is not needed).
unpack() {
    local zip="$1" member="$2" dest="$3"
    [[ -s "$dest" ]] && return 0
    local msg
    if ! msg="$(python3 - "$zip" "$member" "$dest.part" 2>&1 <<'PY'
import sys, zipfile
z, member, out = sys.argv[1:]
try:
    with zipfile.ZipFile(z) as f: data = f.read(member)
except (KeyError, zipfile.BadZipFile, OSError) as e:
    sys.exit(str(e))
open(out, "wb").write(data)
PY
)"; then
        rm -f "$dest.part"
        err "$(basename "$dest"): cannot extract $member from $zip: ${msg##*$'\n'} (corrupt download? delete it and rerun)"
        return 1
    fi
    mv "$dest.part" "$dest"
}

get_raw() {
    case "$1" in
    hellaswag)
        fetch "$raw/hellaswag_val.jsonl" \
            https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl ;;
    piqa)
        fetch "$raw/valid.jsonl" https://yonatanbisk.com/piqa/data/valid.jsonl \
            https://raw.githubusercontent.com/ybisk/ybisk.github.io/master/piqa/data/valid.jsonl &&
        fetch "$raw/valid-labels.lst" https://yonatanbisk.com/piqa/data/valid-labels.lst \
            https://raw.githubusercontent.com/ybisk/ybisk.github.io/master/piqa/data/valid-labels.lst ;;
    arc_easy)
        [[ -s "$raw/ARC-Easy-Test.jsonl" ]] && return 0
        fetch "$raw/ARC-V1-Feb2018.zip" https://ai2-public-datasets.s3.amazonaws.com/arc/ARC-V1-Feb2018.zip &&
        unpack "$raw/ARC-V1-Feb2018.zip" ARC-V1-Feb2018-2/ARC-Easy/ARC-Easy-Test.jsonl "$raw/ARC-Easy-Test.jsonl" ;;
    winogrande)
        [[ -s "$raw/dev.jsonl" ]] && return 0
        fetch "$raw/winogrande_1.1.zip" https://storage.googleapis.com/ai2-mosaic/public/winogrande/winogrande_1.1.zip &&
        unpack "$raw/winogrande_1.1.zip" winogrande_1.1/dev.jsonl "$raw/dev.jsonl" ;;
    lambada)
        fetch "$raw/lambada_test.jsonl" https://openaipublic.blob.core.windows.net/gpt-2/data/lambada_test.jsonl ;;
    wikitext)
        [[ -s "$raw/wiki.test.raw" ]] && return 0
        fetch "$raw/wikitext-2-raw-v1.zip" https://wikitext.smerity.com/wikitext-2-raw-v1.zip \
            https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-raw-v1.zip &&
        unpack "$raw/wikitext-2-raw-v1.zip" wikitext-2-raw/wiki.test.raw "$raw/wiki.test.raw" ;;
    *)
        err "unknown task '$1'; choose from hellaswag piqa arc_easy winogrande lambada wikitext"; return 1 ;;
    esac
}

inputs() {
    case "$1" in
    hellaswag) echo "$raw/hellaswag_val.jsonl" ;;
    piqa) echo "$raw/valid.jsonl $raw/valid-labels.lst" ;;
    arc_easy) echo "$raw/ARC-Easy-Test.jsonl" ;;
    winogrande) echo "$raw/dev.jsonl" ;;
    lambada) echo "$raw/lambada_test.jsonl" ;;
    wikitext) echo "$raw/wiki.test.raw" ;;
    esac
}

tasks=("$@")
[[ ${#tasks[@]} -eq 0 ]] && tasks=(hellaswag piqa arc_easy winogrande lambada wikitext)

if [[ ! -s "$root/data/cache/gpt2.tiktoken" && -z "${PRISM_TOKENIZER:-}" ]]; then
    bash "$root/data/get_tokenizer.sh" || { echo "get_eval: error: no tokenizer ranks file; see data/get_tokenizer.sh" >&2; exit 1; }
fi
make -s -C "$root" build/prepare_eval >/dev/null || { echo "get_eval: error: building build/prepare_eval failed (run make build/prepare_eval to see why)" >&2; exit 1; }
conv="$root/build/prepare_eval"

for t in "${tasks[@]}"; do
    get_raw "$t" || continue
    bin="$out/$t.bin"
    read -r -a ins <<< "$(inputs "$t")"
    fresh=1
    [[ -s "$bin" && "$bin" -nt "$conv" ]] || fresh=0
    for f in "${ins[@]}"; do [[ "$bin" -nt "$f" ]] || fresh=0; done
    if [[ $fresh -eq 1 ]]; then echo "get_eval: $bin up to date"; continue; fi
    "$conv" "$t" "${ins[@]}" -o "$bin" || err "$t: prepare_eval failed on ${ins[*]} (message above)"
done
exit $failed
