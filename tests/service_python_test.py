"""An independent client: Debian's python3-grpcio with protoc --python_out stubs drives the
real `kvserve` binary (Generate, GenerateStream, validation, health, SIGTERM drain).

Usage: /usr/bin/python3 service_python_test.py KVSERVE_BIN MODEL_PATH PYTHON_STUBS_DIR
"""
import sys
import threading
import unittest

import grpc

KVSERVE, MODEL, PYDIR = sys.argv[1:4]
del sys.argv[1:4]

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

    def test_bad_flags_fail_with_a_clear_message(self):
        import subprocess
        for args, needle in ((["--listen", "nonsense"], "--listen must be HOST:PORT"),
                             (["--threads", "-2"], "--threads must be >= 0"),
                             (["--kv-dtype", "q4"], "--kv_dtype must be f32 or f16")):
            proc = subprocess.run([KVSERVE, "--model", MODEL] + args, capture_output=True,
                                  text=True, timeout=30)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(needle, proc.stderr)
        proc = subprocess.run([KVSERVE, "--model", "/nonexistent.gguf", "--listen",
                               "127.0.0.1:0", "--metrics-listen", ""],
                              capture_output=True, text=True, timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("nonexistent.gguf", proc.stderr)


if __name__ == "__main__":
    unittest.main()
