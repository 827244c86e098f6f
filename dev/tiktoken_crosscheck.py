#!/usr/bin/env python3
# dev/tiktoken_crosscheck.py: writes test cases for dev/tokenizer_crosscheck (our text/tokenizer.h) with tiktoken's
# `gpt2` tokens as the expected answer, and prints tiktoken's single-thread encode MB/s on the same texts.
#
#   pip install tiktoken && bash data/get_tokenizer.sh
#   make crosscheck-tokenizer        # runs this script (writes build/crosscheck/, ~2 minutes), then the C++ side
#   python3 dev/tiktoken_crosscheck.py [--mb 1.2] [--english FILES] [--no-codepoints]   # this script alone
#
# Each case is NAME.bin (the input bytes), NAME.tok (expected token ids, int32 little-endian) and NAME.idx
# (uint64 pairs: end byte, end token of each record, so a mismatch is reported per record). Cases:
#   multilingual   >= 1 MB of generated mixed text (valid UTF-8): English with contractions in all cases and
#                  both apostrophes, accents and combining marks, Cyrillic, Greek, CJK, Hangul, Arabic, Hebrew,
#                  Devanagari, Thai, emoji sequences, digits in many scripts, punctuation, every kind of
#                  white space run (\t \r \n \v \f \x85 \xa0 \u2028 \u3000 ... and non-spaces such as \u200b
#                  and \u180e), random code points. Expected = tiktoken encode_ordinary.
#   invalid_utf8   the same generator with random invalid UTF-8 bytes mixed in. tiktoken only takes str, so
#                  the bytes reach Python as the lone surrogates of errors="surrogateescape" (symbols for the
#                  pattern, as text/tokenizer.h treats them); the expected tokens are tiktoken's own BPE
#                  (_encode_single_piece) of each piece's original bytes, pieces cut by tiktoken's pattern via
#                  the `regex` module. That split is first checked against tiktoken itself on the same text
#                  with each invalid byte replaced by "!" (same class, same offsets).
#   codepoints     every code point but surrogates, one line each in letter / number / symbol / space
#                  contexts. Expected = tiktoken encode_ordinary. This is what finds Unicode-version drift.
#   english        the fortune files of /usr/share/games/fortunes (or --english FILES), real English.
# Also writes classes.txt: the code points in \p{L}, \p{N} and \s as tiktoken's own regex engine (Rust regex,
# its Unicode version) sees them, read out by encoding each code point with a one-class pattern; and
# datagym/encoder.json + vocab.bpe built from the ranks (checked by tiktoken's own
# data_gym_to_mergeable_bpe_ranks), so the crosscheck can test the encoder.json loader on the full vocabulary.
import argparse
import glob
import json
import os
import random
import struct
import sys
import time

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def make_encoding(ranks_path):
    import tiktoken
    import tiktoken.load
    import tiktoken_ext.openai_public as pub
    # tiktoken would download the gpt2 files; build the same Encoding from the local ranks file. Take the
    # pattern from tiktoken itself when it is there, so a change upstream shows up here.
    pat = getattr(pub, "r50k_pat_str", GPT2_PATTERN)
    if pat != GPT2_PATTERN:
        print(f"note: tiktoken's gpt2 pattern changed upstream, using it: {pat!r}")
    enc = tiktoken.Encoding(name="gpt2_local", pat_str=pat, explicit_n_vocab=50257,
                            mergeable_ranks=tiktoken.load.load_tiktoken_bpe(ranks_path),
                            special_tokens={"<|endoftext|>": 50256})
    return enc, pat


# ---- the generator ------------------------------------------------------------------------------------------

WORDS = """the of and to in is was that for it with as his on be at by had are but from or have an they which
one you were all her she there would their we him been has when who will no more if out so up said what its about
than into them can only other time new some could these two may first then do any like my now over such our man me
even most made after also did many off before must well back through years much where your way down should because
long each just state people those too how little good world make very year still see own work men day get here
between both life being under never know same last another while us might great old year off come since against
go came right used take three Hello World OpenAI Prism tokenizer GPT transformer attention gradient""".split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
                "\u2019s", "\u2019t", "\u2019re", "'x", "''s", "'", "'''", "'s'", "n't", "N'T"]
PHRASES = [
    "café naïve résumé Ångström São Paulo Straße façade œuvre Ærøskøbing Łódź Dvořák",
    "cafe\u0301 n\u0303 e\u0308\u0301 A\u030a",  # combining marks (Mn): not letters for \p{L}
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЖИК",
    "Γειά σου Κόσμε· ξεσκεπάζω την ψυχοφθόρα βδελυγμία; ΑΒΓΔ",
    "你好，世界！我能吞下玻璃而不伤身体。中文测试：一二三四五。",
    "日本語のテキスト、ひらがなとカタカナ。ｶﾀｶﾅ半角。〜ー",
    "안녕하세요 세계! 한국어 텍스트입니다.",
    "مرحبا بالعالم! هذا نص عربي ١٢٣٤٥٦٧٨٩٠ ۱۲۳ ،؛؟",
    "שלום עולם! זהו טקסט בעברית.",
    "नमस्ते दुनिया! यह हिन्दी पाठ है। १२३",
    "สวัสดีชาวโลก ภาษาไทย ๑๒๓",
    "emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇺🇸🇩🇪 ❤️ ☺︎ 🏳️‍🌈 🤖 🧑🏿‍💻 1️⃣ #️⃣",
    "digits 3.14159 1,000,000 1e-9 0x1F 2024-05-20 ² ³ ½ ¾ Ⅻ ⅷ １２３ ①②③ 𝟘𝟙𝟚 ༡༢ ፲",
    "punctuation: “quoted” ‘single’ — – … «guillemets» ¿qué? ¡sí! @#$%^&*()[]{}<>|\\/~`+=_-",
    "math: ∀x∈ℝ: x² ≥ 0 ∑∫∂ √2 ≠ π ≈ 3.14 ℕℤℚ ∞",
    "<|endoftext|> is not special here <|endoftext|>",
    "URL https://example.com/path?q=1&r=two#frag email a.b@c.de",
    "code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; } // comment\n\tif x:\n\t\treturn None",
]
SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n",
          "  \n  ", "\x0b", "\x0c", "\x85", "\xa0", "\xa0\xa0", " \xa0", "\u1680", "\u2000", "\u2003", "\u200a",
          "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u3000\u3000", " \u3000 ", "\t \n",
          # not White_Space: zero-width space, Mongolian vowel separator, BOM, info separators (str.isspace)
          "\u200b", "\u180e", "\ufeff", "\x1c", "\x1d", "\x1e", "\x1f", "\x00", "\x7f"]
# Invalid UTF-8: lone continuation, truncated 2/3/4-byte sequences, overlongs, surrogates, beyond U+10FFFF,
# bytes that never occur, and a valid character cut in half.
INVALID = [b"\x80", b"\xbf", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80",
           b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5", b"\xf8\x88\x80\x80\x80", b"\xfe",
           b"\xff", b"\xff\xfe", b"\xe4\xbd", b"\x80\x80\x80"]


def random_codepoint(rng):
    while True:
        r = rng.random()
        c = rng.randrange(0x80, 0x800) if r < 0.3 else rng.randrange(0x800, 0x10000) if r < 0.8 else rng.randrange(0x10000, 0x110000)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def generate(nbytes, seed, invalid):
    """Deterministic mixed text of at least nbytes UTF-8 bytes; with invalid=True, random invalid bytes too."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < nbytes:
        r = rng.random()
        if r < 0.35:
            w = rng.choice(WORDS)
            w = w.upper() if rng.random() < 0.1 else w.capitalize() if rng.random() < 0.2 else w
            piece = (" " if rng.random() < 0.8 else "") + w
            if rng.random() < 0.15:
                piece += rng.choice(CONTRACTIONS)
        elif r < 0.5:
            p = rng.choice(PHRASES)
            i, j = sorted(rng.randrange(len(p) + 1) for _ in range(2))
            piece = p[i:j]
        elif r < 0.62:
            piece = rng.choice(SPACES)
        elif r < 0.7:
            piece = str(rng.randrange(10 ** rng.randrange(1, 12))) + rng.choice(["", ".", ",", " ", "%"])
        elif r < 0.78:
            piece = rng.choice(".,;:!?'\"-()[]/&*") * rng.randrange(1, 4)
        elif r < 0.84:
            piece = "".join(random_codepoint(rng) for _ in range(rng.randrange(1, 4)))
        elif r < 0.9:
            piece = rng.choice(CONTRACTIONS)
        else:
            piece = rng.choice(WORDS) + rng.choice(SPACES) * rng.randrange(1, 3)
        b = piece.encode("utf-8")
        if invalid and rng.random() < 0.08:
            bad = rng.choice(INVALID)
            k = rng.randrange(len(b) + 1)
            b = b[:k] + bad + b[k:]
        out.append(b)
        size += len(b)
    return b"".join(out)


def codepoint_lines():
    lines = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        lines.append(f"x{c}y 1{c}2 !{c}! '{c}s {c}'re {c}{c}z {c} {c}.\n")
    return lines


# ---- writing cases ------------------------------------------------------------------------------------------

def write_case(out_dir, name, data, records):
    """records: list of (end_byte, token list for the record); tokens concatenated in NAME.tok."""
    toks, idx = [], []
    for end, t in records:
        toks.extend(t)
        idx.append((end, len(toks)))
    with open(os.path.join(out_dir, name + ".bin"), "wb") as f:
        f.write(data)
    with open(os.path.join(out_dir, name + ".tok"), "wb") as f:
        f.write(struct.pack(f"<{len(toks)}i", *toks))
    with open(os.path.join(out_dir, name + ".idx"), "wb") as f:
        for e, t in idx:
            f.write(struct.pack("<QQ", e, t))
    print(f"  {name}: {len(data) / 1e6:.2f} MB, {len(toks)} tokens, {len(idx)} records")


def mbps(enc, text, nbytes):
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        enc.encode_ordinary(text)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e6


def reference_pieces(enc, pat, data):
    """Expected tokens for raw bytes `data`: tiktoken's pattern on the surrogateescape text, tiktoken's BPE on
    each piece's original bytes. Checks the split against tiktoken on the '!'-for-invalid-byte text first."""
    import regex
    se = data.decode("utf-8", "surrogateescape")
    bang = "".join("!" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in se)
    split_tokens = []
    for m in regex.finditer(pat, bang):
        split_tokens.extend(enc._encode_single_piece(m.group().encode("utf-8")))
    if split_tokens != enc.encode_ordinary(bang):
        sys.exit("error: the regex module splits differently from tiktoken on this text; cannot build the invalid_utf8 reference")
    toks = []
    for m in regex.finditer(pat, se):
        toks.extend(enc._encode_single_piece(m.group().encode("utf-8", "surrogateescape")))
    return toks


def write_classes(out_dir, ranks):
    """The pattern's three classes per tiktoken's engine: a pattern of one class yields tokens exactly for the
    code points in it (text that no match covers is dropped)."""
    import tiktoken
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    with open(os.path.join(out_dir, "classes.txt"), "w") as f:
        for name, pat in [("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s")]:
            enc = tiktoken.Encoding(name="class_" + name, pat_str=pat, mergeable_ranks=ranks, special_tokens={})
            cps = [ord(c) for c in chars if enc.encode_ordinary(c)]
            ranges, i = [], 0
            while i < len(cps):
                j = i
                while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
                    j += 1
                ranges.append(f"{cps[i]:x}-{cps[j]:x}")
                i = j + 1
            f.write(name + " " + " ".join(ranges) + "\n")
            print(f"  classes.txt: {name} has {len(cps)} code points per tiktoken's regex")


def write_datagym(out_dir, enc_ranks):
    """encoder.json + vocab.bpe in the GPT-2 release format, checked by tiktoken's own reader."""
    import tiktoken.load
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    byte_to_char = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in byte_to_char:
            byte_to_char[b] = chr(256 + n)
            n += 1
    spell = lambda bs: "".join(byte_to_char[b] for b in bs)
    by_rank = sorted(enc_ranks.items(), key=lambda kv: kv[1])
    encoder = {spell(bs): r for bs, r in by_rank}
    encoder["<|endoftext|>"] = 50256
    # A merge for rank r: the split into two tokens of lower rank that BPE on r's own bytes ends with.
    merges = []
    for bs, r in by_rank[256:]:
        parts = [bytes([b]) for b in bs]
        while len(parts) > 2:
            best = min(range(len(parts) - 1), key=lambda i: enc_ranks.get(parts[i] + parts[i + 1], 1 << 30))
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        merges.append(spell(parts[0]) + " " + spell(parts[1]))
    d = os.path.join(out_dir, "datagym")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump(encoder, f, ensure_ascii=False)
    with open(os.path.join(d, "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    back = tiktoken.load.data_gym_to_mergeable_bpe_ranks(os.path.join(d, "vocab.bpe"), os.path.join(d, "encoder.json"))
    if back != enc_ranks:
        sys.exit("error: tiktoken reads the written encoder.json/vocab.bpe back differently")
    print(f"  datagym/: encoder.json + vocab.bpe ({len(merges)} merges), read back identically by tiktoken")


def main():
    ap = argparse.ArgumentParser(description="Write tiktoken gpt2 test cases for dev/tokenizer_crosscheck.")
    ap.add_argument("--ranks", default=os.environ.get("PRISM_TOKENIZER", "data/cache/gpt2.tiktoken"))
    ap.add_argument("--out", default="build/crosscheck")
    ap.add_argument("--mb", type=float, default=1.2, help="size of the generated cases in MB (>= 1 for the claim)")
    ap.add_argument("--seed", type=int, default=20240520)
    ap.add_argument("--english", nargs="*", help="English text files (default: /usr/share/games/fortunes/*)")
    ap.add_argument("--no-codepoints", action="store_true", help="skip the 25 MB every-code-point case")
    args = ap.parse_args()
    try:
        import tiktoken  # noqa: F401
        import regex  # noqa: F401
    except ImportError as e:
        sys.exit(f"error: {e}; run: pip install tiktoken")
    if not os.path.exists(args.ranks):
        sys.exit(f"error: {args.ranks} not found; run: bash data/get_tokenizer.sh")
    enc, pat = make_encoding(args.ranks)
    os.makedirs(args.out, exist_ok=True)
    print(f"tiktoken {tiktoken.__version__}, pattern {pat!r}; writing {args.out}/")

    speeds = []
    data = generate(int(args.mb * 1e6), args.seed, invalid=False)
    text = data.decode("utf-8")
    write_case(args.out, "multilingual", data, [(len(data), enc.encode_ordinary(text))])
    speeds.append(("multilingual", mbps(enc, text, len(data))))

    data = generate(int(args.mb * 1e6), args.seed + 1, invalid=True)
    try:
        data.decode("utf-8")
        sys.exit("error: the invalid_utf8 case came out valid")
    except UnicodeDecodeError:
        pass
    write_case(args.out, "invalid_utf8", data, [(len(data), reference_pieces(enc, pat, data))])

    files = args.english
    if files is None:
        files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*") if os.path.isfile(f) and not os.path.islink(f)
                       and not f.endswith(".dat"))
    parts = []
    for f in files:
        b = open(f, "rb").read()
        try:
            b.decode("utf-8")
            parts.append(b)
        except UnicodeDecodeError:
            print(f"  (skipping {f}: not UTF-8)")
    if parts:
        data = b"".join(parts)
        text = data.decode("utf-8")
        write_case(args.out, "english", data, [(len(data), enc.encode_ordinary(text))])
        speeds.append(("english", mbps(enc, text, len(data))))
    else:
        print("  (no English text found; pass --english FILES)")

    if not args.no_codepoints:
        lines = codepoint_lines()
        # A line ends in ".\\n" and the next starts with "x", so no piece spans two lines: records are lines.
        records, end, chunks = [], 0, []
        for ln in lines:
            b = ln.encode("utf-8")
            chunks.append(b)
            end += len(b)
            records.append((end, enc.encode_ordinary(ln)))
        data = b"".join(chunks)
        whole = enc.encode_ordinary(data.decode("utf-8"))
        if whole != [t for _, r in records for t in r]:
            sys.exit("error: codepoints case: per-line tokens differ from whole-text tokens")
        write_case(args.out, "codepoints", data, records)

    write_classes(args.out, enc._mergeable_ranks)
    write_datagym(args.out, enc._mergeable_ranks)
    for name, s in speeds:
        print(f"tiktoken single-thread encode_ordinary on {name}: {s:.2f} MB/s")
    print(f"next: build/tokenizer_crosscheck {args.ranks} {args.out}")


if __name__ == "__main__":
    main()
