"""What the real `kvserve` says it runs: `kvserve --version`, the start-up log line and the
kvserve_build_info / kvserve_degraded_path metrics on /metrics, with OPENBLAS_CORETYPE
unset (the best OpenBLAS core for this CPU, re-executing if OpenBLAS fell back) and set
by the user (kept, reported degraded). The expected core comes from /proc/cpuinfo, not
from kvserve's own CPUID code.

Usage: /usr/bin/python3 build_info_test.py KVSERVE_BIN KVSERVE_CACHE_BIN MODEL_PATH
"""
import os
import re
import subprocess
import sys
import unittest
import urllib.request

KVSERVE, KVSERVE_CACHE, MODEL = sys.argv[1:4]
del sys.argv[1:4]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvserve_testlib as lib  # noqa: E402

# OpenBLAS cores by sgemm generation (as backends/cpu_blas/blas_core.cc ranks them).
OLD_GENERATION = {"prescott", "atom", "opteron", "opteron_sse3", "barcelona", "core2",
                  "penryn", "dunnington", "nehalem", "sandybridge"}
# The newest generations: OpenBLAS's own choice of any core of the best one's generation is
# kept, not re-executed (Cooperlake is SkylakeX's sgemm plus bf16 kernels kvserve does not
# call; OpenBLAS 0.3.21 picks SkylakeX on an AVX512_BF16 Xeon whose model it does not know).
SAME_GENERATION = [{"skylakex", "cooperlake"}, {"haswell", "zen", "excavator"}]


def best_generation(core):
    """The cores kvserve treats as good as `core` (lower case)."""
    for cores in SAME_GENERATION:
        if core.lower() in cores:
            return cores
    return {core.lower()}


def best_core_from_cpuinfo():
    with open("/proc/cpuinfo") as f:
        text = f.read()
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split())
    amd = "AuthenticAMD" in text
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "Cooperlake" if "avx512_bf16" in flags else "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Zen" if amd else "Haswell"
    if "avx" in flags:
        return "Sandybridge"
    if "sse4_2" in flags:
        return "Nehalem"
    if "ssse3" in flags:
        return "Core2"
    return "Prescott"


def env_with(coretype):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "KVSERVE_BLAS_REEXEC")}
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return env


def version(binary, env):
    out = subprocess.run([binary, "--version"], env=env, capture_output=True, text=True,
                         timeout=30, check=True)
    return dict(line.split(": ", 1) for line in out.stdout.splitlines()[1:]), out


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as resp:
        return resp.read().decode()


def build_info(text):
    m = re.search(r"^kvserve_build_info\{([^}]*)\} 1$", text, re.M)
    assert m, text
    return dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))


def degraded(text, path):
    m = re.search(r'^kvserve_degraded_path\{path="%s"\} (\S+)$' % path, text, re.M)
    assert m, text
    return float(m.group(1))


class BuildInfoTest(unittest.TestCase):

    def test_version_of_both_servers(self):
        fields, out = version(KVSERVE, env_with(None))
        self.assertTrue(out.stdout.startswith("kvserve "), out.stdout)
        self.assertEqual(fields["backend"], "cpu_blas")
        self.assertIn(fields["kernel level"], ("avx512bf16", "avx512vnni", "avx512", "avx_vnni", "avx2", "scalar"))
        self.assertIn(fields["BLAS core"].lower(), best_generation(best_core_from_cpuinfo()))
        self.assertIn("OpenBLAS", fields["OpenBLAS config"])
        self.assertRegex(fields["commit"], r"^([0-9a-f]{12}|unknown)$")
        self.assertEqual(fields["degraded"],
                         "simd_kernels" if fields["kernel level"] == "scalar" else "none")
        self.assertRegex(out.stderr, r"kvserve: BLAS core %s: " % fields["BLAS core"])

        cache = subprocess.run([KVSERVE_CACHE, "--version"], capture_output=True, text=True,
                               timeout=30, check=True).stdout
        self.assertRegex(cache, r"^kvserve-cache \S+\ncommit: \S+\nbackend: none")

    def test_metrics_name_the_best_core(self):
        best = best_generation(best_core_from_cpuinfo())
        with lib.KvserveProcess(KVSERVE, MODEL, env=env_with(None)) as server:
            text = scrape(server.metrics_port)
        info = build_info(text)
        self.assertIn(info["blas_core"].lower(), best)
        self.assertTrue(any("BLAS core %s: " % info["blas_core"] in line for line in server.lines),
                        server.lines)
        self.assertEqual(info["backend"], "cpu_blas")
        self.assertIn(info["kernel_level"], ("avx512bf16", "avx512vnni", "avx512", "avx_vnni", "avx2", "scalar"))
        self.assertEqual(degraded(text, "blas_core"), 0)
        self.assertEqual(degraded(text, "simd_kernels"), 1 if info["kernel_level"] == "scalar" else 0)

    def test_user_setting_wins_and_is_reported_degraded(self):
        if best_core_from_cpuinfo().lower() in OLD_GENERATION:
            self.skipTest("this CPU's best core is of the SSE/AVX generation")
        env = env_with("Prescott")
        fields, out = version(KVSERVE, env)
        self.assertEqual(fields["BLAS core"], "Prescott")
        self.assertEqual(fields["degraded"].split(", ")[0], "blas_core")
        with lib.KvserveProcess(KVSERVE, MODEL, env=env) as server:
            text = scrape(server.metrics_port)
            self.assertTrue(any("warning: BLAS core Prescott: OPENBLAS_CORETYPE=Prescott set by "
                                "the user, kept" in line for line in server.lines), server.lines)
        self.assertEqual(build_info(text)["blas_core"], "Prescott")
        self.assertEqual(degraded(text, "blas_core"), 1)


if __name__ == "__main__":
    lib.main(100)
