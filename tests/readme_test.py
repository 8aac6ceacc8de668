"""README.md's Python example ("API at a glance") runs as written against a real kvserve:
the block is extracted from README.md, pointed at the test's server and stub folder, run with
/usr/bin/python3, and its second session turn reports cached tokens.

Usage: /usr/bin/python3 readme_test.py KVSERVE_BIN MODEL_PATH PYTHON_STUBS_DIR
"""
import os
import re
import subprocess
import sys
import unittest

KVSERVE, MODEL, PYDIR = sys.argv[1:4]
del sys.argv[1:4]

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvserve_testlib as lib  # noqa: E402


class ReadmeTest(unittest.TestCase):

    def test_python_example_runs(self):
        with open(os.path.join(HERE, "..", "README.md")) as f:
            blocks = re.findall(r"^```python\n(.*?)^```", f.read(), re.M | re.S)
        self.assertEqual(len(blocks), 1)
        code = blocks[0]
        self.assertIn('"127.0.0.1:50051"', code)
        self.assertIn('"build/proto/python"', code)
        with lib.KvserveProcess(KVSERVE, MODEL, ["--kv-budget-mib", "64"]) as server:
            code = code.replace('"127.0.0.1:50051"', repr(server.target()))
            code = code.replace('"build/proto/python"', repr(PYDIR))
            run = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True,
                                 text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        lines = run.stdout.strip().splitlines()
        self.assertEqual(len(lines), 3, run.stdout)
        self.assertTrue(lines[0].endswith(" 32"), lines[0])
        cached = [int(re.search(r"cached tokens: (\d+)$", l).group(1)) for l in lines[1:]]
        self.assertEqual(cached[0], 0)
        self.assertGreater(cached[1], 0)


if __name__ == "__main__":
    lib.main(150)
