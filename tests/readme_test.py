"""README.md's examples run as written against a real kvserve.

The Python example ("API at a glance"): the block is extracted, pointed at the test's server and
stub folder, run with /usr/bin/python3, and its second session turn reports cached tokens.

The curl examples (heading "OpenAI-compatible HTTP API"): every command starting with `curl` in
a ```sh block of that section (to the end of the command: continuation lines and open quotes)
runs with bash against a kvserve on an ephemeral HTTP port (each 127.0.0.1:8080 /
localhost:8080 of the README replaced by it; so every command must name one), and must exit 0
with HTTP 200 and a JSON body, or, streamed, an event stream ending in "data: [DONE]". Keep the
commands plain (no pipes): the test wraps `curl` to record the status and body.

Usage: /usr/bin/python3 readme_test.py KVSERVE_BIN MODEL_PATH PYTHON_STUBS_DIR
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest

KVSERVE, MODEL, PYDIR = sys.argv[1:4]
del sys.argv[1:4]

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvserve_testlib as lib  # noqa: E402


HTTP_SECTION = "OpenAI-compatible HTTP API"  # a heading's title, at any level
README_HTTP_ADDRESSES = ("127.0.0.1:8080", "localhost:8080")
# `curl` as the README's commands call it, with its body kept in $BODY_FILE and the HTTP status
# printed (bash runs the function instead of the binary).
CURL_WRAPPER = ('curl() { command curl -sS --max-time 60 -o "$BODY_FILE" -w "%{http_code}" '
                '"$@"; }\n')


def read_readme():
    with open(os.path.join(HERE, "..", "README.md")) as f:
        return f.read()


def section_text(readme, title):
    """The text under the heading `title` up to the next heading of its level or above (lines
    inside ``` fences, such as shell comments, are not headings)."""
    lines, level, in_fence = [], None, False
    for line in readme.splitlines(keepends=True):
        if line.startswith("```"):
            in_fence = not in_fence
        heading = None if in_fence else re.match(r"(#+) (.*)$", line.rstrip("\n"))
        if level is None:
            if heading and heading.group(2) == title:
                level = len(heading.group(1))
        elif heading and len(heading.group(1)) <= level:
            break
        else:
            lines.append(line)
    if level is None:
        raise AssertionError("README.md has no %r heading" % title)
    return "".join(lines)


def curl_commands(readme):
    """The curl commands of the ```sh blocks in README's HTTP API section, each a complete shell
    command (its continuation lines and multi-line quotes included)."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", section_text(readme, HTTP_SECTION),
                            re.M | re.S):
        pending = None
        for line in block.splitlines():
            if pending is None and not line.startswith("curl "):
                continue
            pending = line if pending is None else pending + "\n" + line
            if not line.endswith("\\") and is_complete(pending):
                commands.append(pending)
                pending = None
        if pending is not None:
            raise AssertionError("unfinished command in README.md: %r" % pending)
    return commands


def is_complete(command):
    """Whether `command` has no open quote."""
    try:
        shlex.split(command)
        return True
    except ValueError:
        return False


class ReadmeTest(unittest.TestCase):

    def test_python_example_runs(self):
        blocks = re.findall(r"^```python\n(.*?)^```", read_readme(), re.M | re.S)
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

    def test_curl_examples_run(self):
        commands = curl_commands(read_readme())
        joined = "\n".join(commands)
        for needed in ("/v1/models", "/v1/chat/completions", "/v1/completions", '"stream": true'):
            self.assertIn(needed, joined, "README's HTTP API examples show %s" % needed)
        for command in commands:
            self.assertTrue(any(a in command for a in README_HTTP_ADDRESSES), command)
        args = ["--kv-budget-mib", "64", "--chat-template", "chatml"]
        with lib.KvserveProcess(KVSERVE, MODEL, args) as server, \
                tempfile.TemporaryDirectory() as tmp:
            body_file = os.path.join(tmp, "body")
            address = "127.0.0.1:%d" % server.http_port
            for command in commands:
                with self.subTest(command=command):
                    runnable = command
                    for readme_address in README_HTTP_ADDRESSES:
                        runnable = runnable.replace(readme_address, address)
                    run = subprocess.run(["bash", "-c", CURL_WRAPPER + runnable],
                                         env=dict(os.environ, BODY_FILE=body_file),
                                         capture_output=True, text=True, timeout=90)
                    with open(body_file) as f:
                        body = f.read()
                    self.assertEqual((run.returncode, run.stdout), (0, "200"),
                                     run.stderr + body)
                    if re.search(r'"stream"\s*:\s*true', command):
                        self.assertTrue(body.startswith("data: "), body)
                        self.assertTrue(body.endswith("data: [DONE]\n\n"), body)
                    else:
                        self.assertIsInstance(json.loads(body), dict, body)


if __name__ == "__main__":
    lib.main(150)
