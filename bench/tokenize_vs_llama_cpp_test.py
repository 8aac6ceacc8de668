#!/usr/bin/env python3
"""kvserve-bench tokenize against llama.cpp's llama-tokenize on chat-formatted strings (control
tokens, whitespace after them, BOS) for the vocabularies of models/vocab, with and without
--parse-special: the ids must be equal. llama.cpp is a peer built beside the project
(../shared/PEERS.md), found in $KVSERVE_LLAMA_CPP_BIN (default /tmp/llama.cpp/build/bin);
when it or the vocabularies are absent the test is skipped (exit 77) with a message.

Usage: tokenize_vs_llama_cpp_test.py KVSERVE_BENCH VOCAB_DIR
"""
import os
import subprocess
import sys

CASES = {
    "llama-bpe": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there"
                 "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "qwen2": "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
             "Hi <think> x</think><|im_end|>\n<|im_start|>assistant\n",
    "phi-3": "<|user|>\nHi<|end|>\n<|assistant|>\n  x",
    "llama-spm": "<s>[INST] hi [/INST] ok</s>",
    "deepseek-llm": "<｜begin▁of▁sentence｜>User: hi\n\nAssistant:",
    "gpt-2": "a<|endoftext|>b  <|endoftext|>",
    "mpt": "x<|endoftext|> y",
}


def ids(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    line = out.strip().splitlines()[-1]
    return [int(t) for t in line.strip("[]").replace(" ", "").split(",") if t]


def main():
    kvserve, vocab_dir = sys.argv[1], sys.argv[2]
    llama = os.path.join(os.environ.get("KVSERVE_LLAMA_CPP_BIN", "/tmp/llama.cpp/build/bin"),
                         "llama-tokenize")
    if not os.path.exists(llama):
        print(f"SKIP: {llama} not found (build llama.cpp as ../shared/PEERS.md says)")
        return 77
    failures = 0
    for name, text in CASES.items():
        vocab = os.path.join(vocab_dir, f"ggml-vocab-{name}.gguf")
        if not os.path.exists(vocab):
            print(f"SKIP: {vocab} missing (models/fetch-vocab.sh)")
            return 77
        for special in (False, True):
            ours = ids([kvserve, "tokenize", "--model", vocab, "--text", text] +
                       (["--parse-special"] if special else []))
            theirs = ids([llama, "-m", vocab, "-p", text, "--ids", "--log-disable",
                          "--no-escape"] + ([] if special else ["--no-parse-special"]))
            if ours != theirs:
                failures += 1
                print(f"{name} parse_special={special}: kvserve {ours} != llama.cpp {theirs}")
    print("ok" if failures == 0 else f"{failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
