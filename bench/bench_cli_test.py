#!/usr/bin/env python3
"""kvserve-bench's dispatcher: `--help` lists every subcommand; each subcommand's `--help`
prints its usage and its own flags (not another's) and exits 0; no subcommand, an unknown
one, a positional argument or a flag of another subcommand exit 2 with a message;
--version exits 0.

Usage: bench_cli_test.py KVSERVE_BENCH
"""
import subprocess
import sys

# Each subcommand with flags its --help must list (its own and shared ones it reads).
SUBCOMMANDS = {
    "backend": ["--decode_tokens", "--batches", "--threads", "--model", "--json"],
    "engine": ["--mode", "--reps", "--streams", "--history", "--max_tokens"],
    "service": ["--rounds", "--latency_calls", "--streams", "--prompt"],
    "tokenizer": ["--vocab", "--runs", "--text"],
    "cache-replay": ["--trace", "--capacity_blocks", "--policy", "--json"],
    "cache-trace": ["--output", "--seed", "--turns", "--think", "--system_prompts"],
    "cache-reuse": ["--model", "--history", "--repeats", "--kv_dtype"],
    "cache-throughput": ["--chain_blocks", "--target", "--blocks", "--disk_dir"],
    "cache-storage": ["--redis", "--disk_fsync", "--blocks"],
    "mkmodel": ["--preset", "--dtype", "--out", "--seed"],
    "generate": ["--temperature", "--stop", "--prompt", "--seed", "--ignore_eos"],
    "tokenize": ["--no_bos", "--file", "--text", "--parse_special"],
}


def run(binary, *args):
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main():
    binary = sys.argv[1]
    rc, out, err = run(binary, "--help")
    assert rc == 0, (rc, err)
    for name in SUBCOMMANDS:
        assert f"  {name} " in out, (name, out)

    for name, flags in SUBCOMMANDS.items():
        rc, out, err = run(binary, name, "--help")
        assert rc == 0, (name, rc, err)
        assert f"kvserve-bench {name}" in out, (name, out)
        for flag in flags:
            assert f"    {flag} (" in out, (name, flag, out)
    # Another subcommand's flags are not listed, nor shared flags it does not read.
    rc, out, _ = run(binary, "backend", "--help")
    assert "--mode (" not in out and "--prompt (" not in out, out

    rc, _, err = run(binary)
    assert rc == 2 and "name a subcommand" in err, (rc, err)
    rc, _, err = run(binary, "no-such")
    assert rc == 2 and 'unknown subcommand "no-such"' in err and "cache-replay" in err, (rc, err)
    rc, _, err = run(binary, "tokenize", "--decode-tokens", "3")
    assert rc == 2 and "--decode_tokens is not a flag of this subcommand" in err, (rc, err)
    rc, _, err = run(binary, "mkmodel", "--threads=2")
    assert rc == 2 and "--threads is not a flag" in err, (rc, err)
    rc, _, err = run(binary, "tokenize", "--model", "x.gguf", "--text", "a", "extra")
    assert rc == 2 and 'unexpected argument "extra"' in err, (rc, err)
    rc, _, err = run(binary, "mkmodel", "--preset", "tiny")
    assert rc == 2 and "kvserve-bench mkmodel: --preset, --dtype and --out are required" in err, (
        rc, err)
    rc, out, err = run(binary, "--version")
    assert rc == 0 and out.startswith("kvserve-bench "), (rc, out, err)
    print("bench_cli_test: ok")


if __name__ == "__main__":
    main()
