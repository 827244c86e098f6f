#!/usr/bin/env bash
# data/get_tokenizer.sh: fetch the GPT-2 BPE ranks file (gpt2.tiktoken) into data/cache/gpt2.tiktoken.
#
# The file ships inside the openai-whisper wheel on PyPI (whisper/assets/gpt2.tiktoken), which is a registry
# this project can reach; openaipublic.blob.core.windows.net (where tiktoken itself downloads from) may not
# be. Idempotent: does nothing when the file is already there. Nothing downloaded is committed (data/cache/
# is git-ignored). Usage: bash data/get_tokenizer.sh [DEST]   (DEST defaults to data/cache/gpt2.tiktoken)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/data/cache/gpt2.tiktoken}"
# The ranks file has 50256 lines (every token except <|endoftext|>); anything shorter is a broken download.
want_lines=50256

if [[ -s "$dest" && "$(wc -l < "$dest")" -eq $want_lines ]]; then
    echo "get_tokenizer: $dest already present"
    exit 0
fi

python=""
for p in python3 python; do command -v "$p" >/dev/null 2>&1 && { python="$p"; break; }; done
[[ -n "$python" ]] || { echo "get_tokenizer: error: python3 not found; install python3 and pip, then rerun" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! "$python" -m pip download --quiet --no-deps openai-whisper -d "$tmp" >"$tmp/pip.log" 2>&1; then
    echo "get_tokenizer: error: 'pip download --no-deps openai-whisper' failed ($(tail -n 1 "$tmp/pip.log")); check network/PyPI access, or put gpt2.tiktoken at $dest yourself" >&2
    exit 1
fi

# pip may fetch a wheel or an sdist; both are zip or tar archives holding whisper/assets/gpt2.tiktoken.
mkdir -p "$(dirname "$dest")"
"$python" - "$tmp" "$dest.part" <<'PY'
import glob, sys, tarfile, zipfile
tmp, out = sys.argv[1], sys.argv[2]
for f in sorted(glob.glob(tmp + "/*")):
    data = None
    if zipfile.is_zipfile(f):
        with zipfile.ZipFile(f) as z:
            names = [n for n in z.namelist() if n.endswith("whisper/assets/gpt2.tiktoken")]
            if names: data = z.read(names[0])
    elif tarfile.is_tarfile(f):
        with tarfile.open(f) as t:
            names = [n for n in t.getnames() if n.endswith("whisper/assets/gpt2.tiktoken")]
            if names: data = t.extractfile(names[0]).read()
    if data is not None:
        open(out, "wb").write(data)
        sys.exit(0)
sys.exit("get_tokenizer: error: no whisper/assets/gpt2.tiktoken inside the downloaded openai-whisper package")
PY
lines="$(wc -l < "$dest.part")"
if [[ "$lines" -ne $want_lines ]]; then
    rm -f "$dest.part"
    echo "get_tokenizer: error: extracted gpt2.tiktoken has $lines lines, expected $want_lines; the openai-whisper package layout may have changed, put the GPT-2 gpt2.tiktoken at $dest by hand" >&2
    exit 1
fi
mv "$dest.part" "$dest"
echo "get_tokenizer: wrote $dest ($lines ranks)"
