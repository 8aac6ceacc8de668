#!/usr/bin/env python3
"""Writes the 1 MiB mixed-language text of the tokenizer benchmark (docs/performance.md).

The text is every llama.cpp test text of the vocabulary folder (English, code, emoji,
CJK, Cyrillic, Greek, Arabic, whitespace runs), then seeded pseudo-random prose in
several scripts, cut at 1,048,576 bytes on a character boundary. The same inputs and
seed always give the same bytes.

Usage: bench/make_tokenizer_text.py VOCAB_DIR OUT_FILE
"""
import glob
import os
import random
import sys

SIZE_BYTES = 1 << 20
SEED = 20261130

# (first, last) code points of the letters of each script, and how often it appears.
SCRIPTS = [
    ((0x61, 0x7A), 40),      # Latin
    ((0xE0, 0xFF), 5),       # Latin-1 letters
    ((0x430, 0x44F), 10),    # Cyrillic
    ((0x3B1, 0x3C9), 5),     # Greek
    ((0x4E00, 0x9FA5), 15),  # CJK ideographs
    ((0xAC00, 0xD7A3), 5),   # Hangul syllables
    ((0x627, 0x64A), 5),     # Arabic
    ((0x3041, 0x3096), 5),   # Hiragana
    ((0x1F600, 0x1F64F), 2),  # emoji
]
PUNCT = [". ", ", ", "! ", "? ", "; ", ": ", " - ", "\n", "\n\n", " (", ") ", "'s ", "'ll "]


def word(rng):
    (lo, hi), = rng.choices([s[0] for s in SCRIPTS], weights=[s[1] for s in SCRIPTS])
    n = rng.randint(1, 4) if lo >= 0x3041 else rng.randint(1, 10)
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def main():
    vocab_dir, out_path = sys.argv[1], sys.argv[2]
    parts = []
    for path in sorted(glob.glob(os.path.join(vocab_dir, "*.inp"))):
        with open(path, encoding="utf-8") as f:
            parts.append(f.read().replace("\n__ggml_vocab_test__\n", "\n"))
    rng = random.Random(SEED)
    size = sum(len(p.encode()) for p in parts)
    while size < SIZE_BYTES + 64:
        sentence = " ".join(word(rng) for _ in range(rng.randint(3, 15)))
        if rng.random() < 0.2:
            sentence += " " + str(rng.randint(0, 10 ** rng.randint(1, 7)))
        sentence += rng.choice(PUNCT)
        parts.append(sentence)
        size += len(sentence.encode())
    data = "".join(parts).encode()[:SIZE_BYTES]
    data = data.decode("utf-8", errors="ignore").encode()  # drop a cut character
    with open(out_path, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
