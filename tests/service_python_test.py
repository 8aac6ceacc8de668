"""An independent client: Debian's python3-grpcio with protoc --python_out stubs drives the
real `kvserve` binary (Generate, GenerateStream, validation, health, SIGTERM drain).

Also drives the kvserve-cli binary and scripts/run-main.sh (the README's main job).

Usage: /usr/bin/python3 service_python_test.py KVSERVE_BIN MODEL_PATH PYTHON_STUBS_DIR CLI_BIN
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

import grpc

KVSERVE, MODEL, PYDIR, CLI = sys.argv[1:5]
del sys.argv[1:5]
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import kvserve_testlib as lib  # noqa: E402

lib.add_python_stubs(PYDIR)
from kvserve.v1 import inference_pb2 as pb  # noqa: E402

PROMPT = "Once upon a time"


def methods(channel):
    generate = channel.unary_unary("/kvserve.v1.Inference/Generate",
                                   request_serializer=pb.GenerateRequest.SerializeToString,
                                   response_deserializer=pb.GenerateResponse.FromString)
    stream = channel.unary_stream("/kvserve.v1.Inference/GenerateStream",
                                  request_serializer=pb.GenerateRequest.SerializeToString,
                                  response_deserializer=pb.GenerateStreamResponse.FromString)
    return generate, stream


def greedy(text, max_tokens, **kw):
    return pb.GenerateRequest(text=text, max_tokens=max_tokens,
                              sampling=pb.SamplingParams(temperature=0.0), **kw)


class PythonClientTest(unittest.TestCase):

    def test_generate_and_stream_agree(self):
        with lib.KvserveProcess(KVSERVE, MODEL) as server:
            with grpc.insecure_channel(server.target()) as channel:
                self.assertEqual(lib.health_status(channel, ""), 1)
                self.assertEqual(lib.health_status(channel, "kvserve.v1.Inference"), 1)
                generate, stream = methods(channel)
                unary = generate(greedy(PROMPT, 32), timeout=30)
                self.assertTrue(unary.text.startswith(", there was a little girl named Lily."),
                                unary.text)
                self.assertEqual(len(unary.token_ids), 32)
                self.assertEqual(unary.finish_reason, pb.FINISH_REASON_LENGTH)

                messages = list(stream(greedy(PROMPT, 32), timeout=30))
                self.assertGreaterEqual(len(messages), 1)
                self.assertEqual("".join(m.text for m in messages), unary.text)
                ids = [i for m in messages for i in m.token_ids]
                self.assertEqual(ids, list(unary.token_ids))
                last = messages[-1]
                self.assertEqual(last.finish_reason, pb.FINISH_REASON_LENGTH)
                self.assertEqual(last.usage.completion_tokens, 32)
                self.assertGreater(last.usage.total_time.ToNanoseconds(), 0)

    def test_invalid_argument_names_the_field(self):
        with lib.KvserveProcess(KVSERVE, MODEL) as server:
            with grpc.insecure_channel(server.target()) as channel:
                generate, stream = methods(channel)
                bad = greedy(PROMPT, 8)
                bad.sampling.top_p = 1.5
                with self.assertRaises(grpc.RpcError) as err:
                    generate(bad, timeout=10)
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertTrue(err.exception.details().startswith("sampling.top_p"))
                with self.assertRaises(grpc.RpcError) as err:
                    list(stream(greedy(PROMPT, 0), timeout=10))
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertTrue(err.exception.details().startswith("max_tokens"))

    def test_sigterm_drains_in_flight_stream_and_exits_zero(self):
        with lib.KvserveProcess(KVSERVE, MODEL, ["--drain-grace", "20s"]) as server:
            with grpc.insecure_channel(server.target()) as channel:
                _, stream = methods(channel)
                call = stream(greedy(PROMPT, 400, ignore_eos=True), timeout=30)
                first = next(call)  # the generation is running
                received = [first]
                done = threading.Event()

                def read_rest():
                    try:
                        received.extend(call)
                    finally:
                        done.set()

                reader = threading.Thread(target=read_rest)
                reader.start()
                code = server.terminate_and_wait(timeout=30)
                reader.join(timeout=30)
                self.assertTrue(done.is_set())
                self.assertEqual(code, 0)
                self.assertEqual(call.code(), grpc.StatusCode.OK)
                self.assertEqual(received[-1].usage.completion_tokens, 400)
                self.assertTrue(any("stopped" in l for l in server.lines), server.lines)

    def test_cli_generate_chat_and_bench(self):
        with lib.KvserveProcess(KVSERVE, MODEL) as server:
            target = ["--target", server.target()]
            out = subprocess.run([CLI, "generate"] + target + ["--prompt", PROMPT,
                                  "--max-tokens", "24", "--stream"],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertTrue(out.stdout.startswith(PROMPT + ", there was a little girl"),
                            out.stdout)
            self.assertIn("FINISH_REASON_LENGTH", out.stderr)
            chat = subprocess.run([CLI, "chat"] + target + ["--max-tokens", "20"],
                                  input="Once upon a time\nShe was happy.\n",
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(chat.returncode, 0, chat.stderr)
            usages = [l for l in chat.stderr.splitlines() if l.startswith("[FINISH")]
            self.assertEqual(len(usages), 2, chat.stderr)
            # Turn 2 reuses the full KV blocks (16 tokens) of turn 1's 25-token history.
            self.assertNotIn("cached local 0,", usages[1])
            bench = subprocess.run([CLI, "bench"] + target + ["--concurrency", "2", "--requests",
                                   "4", "--max-tokens", "16", "--ignore-eos", "--json"],
                                   capture_output=True, text=True, timeout=120)
            self.assertEqual(bench.returncode, 0, bench.stderr)
            report = json.loads(bench.stdout.strip().splitlines()[-1])
            self.assertEqual(report["tokens"]["output"], 4 * 16)
            self.assertEqual(report["requests"]["failed"], 0)
            self.assertGreater(report["output_tokens_per_s"], 0)

    def test_cli_chat_sends_messages_when_the_model_has_a_template(self):
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, "stories260K-chatml.gguf")
            lib.write_gguf_with_string(
                MODEL, model, "tokenizer.chat_template",
                "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}")
            with lib.KvserveProcess(KVSERVE, model) as server:
                chat = subprocess.run([CLI, "chat", "--target", server.target(),
                                       "--max-tokens", "20", "--system", "Tell a story."],
                                      input="Once upon a time\nShe was happy.\n",
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(chat.returncode, 0, chat.stderr)
                self.assertIn("(chatml chat template)", chat.stderr)
                usages = [l for l in chat.stderr.splitlines() if l.startswith("[FINISH")]
                self.assertEqual(len(usages), 2, chat.stderr)
                # Turn 2 (one user message) continues turn 1's rendered history.
                self.assertNotIn("cached local 0,", usages[1])
                # The rendered turn 1 (system, user, generation prompt) is longer than
                # the line itself: the template was applied.
                first_prompt = int(usages[0].split("prompt ")[1].split(" ")[0])
                self.assertGreater(first_prompt, 30, usages[0])

    def test_run_main_script_serves_and_stops_on_sigterm(self):
        build_dir = os.path.dirname(os.path.dirname(os.path.abspath(KVSERVE)))
        env = dict(os.environ, KVSERVE_LISTEN="127.0.0.1:0", KVSERVE_METRICS_LISTEN="127.0.0.1:0")
        proc = subprocess.Popen([os.path.join(SOURCE_DIR, "scripts", "run-main.sh"), build_dir,
                                 MODEL, "--threads", "1"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            lines = []
            for line in proc.stdout:  # bounded by the ready line or the process ending
                lines.append(line)
                if "kvserve: ready" in line:
                    break
            text = "".join(lines)
            self.assertIn("kvserve-cli", text)
            self.assertIn("generate --prompt", text)
            self.assertIn("kvserve: ready", text)
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=30), 0)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            proc.stdout.close()

    def test_bad_flags_fail_with_a_clear_message(self):
        for args, needle in ((["--listen", "nonsense"], "--listen must be HOST:PORT"),
                             (["--threads", "-2"], "--threads must be >= 0"),
                             (["--kv-dtype", "q4"], "--kv_dtype must be f32 or f16")):
            proc = subprocess.run([KVSERVE, "--model", MODEL] + args, capture_output=True,
                                  text=True, timeout=30)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(needle, proc.stderr)
        proc = subprocess.run([KVSERVE, "--model", "/nonexistent.gguf", "--listen",
                               "127.0.0.1:0", "--metrics-listen", "", "--http-listen", ""],
                              capture_output=True, text=True, timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("nonexistent.gguf", proc.stderr)


if __name__ == "__main__":
    lib.main(170)
