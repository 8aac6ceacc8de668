#!/usr/bin/env python3
"""kvserve-bench tokenize end to end on the stories260K model: one JSON array of ids on stdout,
BOS as the file declares unless --no-bos, "</s>" in the text is the EOS control token only
with --parse-special, and a missing file is exit status 2 with a message.

Usage: tokenize_command_test.py KVSERVE_BENCH MODELS_DIR
"""
import json
import subprocess
import sys


def run(binary, *args):
    p = subprocess.run([binary, "tokenize", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main():
    binary, models = sys.argv[1], sys.argv[2]
    model = models + "/stories260K.gguf"
    rc, out, err = run(binary, "--model", model, "--text", "Once</s>upon")
    assert rc == 0, err
    plain = json.loads(out)
    assert plain[0] == 1 and 2 not in plain, plain  # BOS, no EOS from the text
    rc, out, err = run(binary, "--model", model, "--text", "Once</s>upon", "--parse-special")
    assert rc == 0, err
    parsed = json.loads(out)
    assert parsed.count(2) == 1 and parsed[0] == 1, parsed
    rc, out, err = run(binary, "--model", model, "--text", "Once", "--no-bos")
    assert rc == 0 and 1 not in json.loads(out), out
    rc, out, err = run(binary, "--model", model, "--text", "")
    assert rc == 0 and json.loads(out) == [1], out
    rc, out, err = run(binary, "--model", models + "/no-such.gguf", "--text", "x")
    assert rc == 2 and "no-such.gguf" in err, (rc, err)
    rc, out, err = run(binary, "--model", model)
    assert rc == 2 and "--text" in err, (rc, err)
    print("tokenize_command_test: ok")


if __name__ == "__main__":
    main()
