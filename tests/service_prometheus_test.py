"""A real Prometheus (Debian's /usr/bin/prometheus) scrapes the real `kvserve` binary; PromQL
through Prometheus' HTTP API returns the generated-token counter and a TTFT quantile.

Usage: /usr/bin/python3 service_prometheus_test.py KVSERVE_BIN MODEL_PATH PYTHON_STUBS_DIR
"""
import math
import os
import sys
import tempfile
import unittest

import grpc

KVSERVE, MODEL, PYDIR = sys.argv[1:4]
del sys.argv[1:4]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvserve_testlib as lib  # noqa: E402

lib.add_python_stubs(PYDIR)
from kvserve.v1 import inference_pb2 as pb  # noqa: E402



class PrometheusScrapeTest(unittest.TestCase):

    def test_promql_sees_generated_tokens_and_ttft(self):
        with lib.KvserveProcess(KVSERVE, MODEL) as server, \
                tempfile.TemporaryDirectory() as tmp:
            channel = grpc.insecure_channel(server.target())
            self.addCleanup(channel.close)
            generate = channel.unary_unary(
                "/kvserve.v1.Inference/Generate",
                request_serializer=pb.GenerateRequest.SerializeToString,
                response_deserializer=pb.GenerateResponse.FromString)
            generated = 0
            for _ in range(3):
                r = generate(pb.GenerateRequest(text="Once upon a time", max_tokens=20,
                                                sampling=pb.SamplingParams(temperature=0.0)),
                             timeout=30)
                generated += len(r.token_ids)
            self.assertEqual(generated, 60)

            config = os.path.join(tmp, "prometheus.yml")
            with open(config, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        "scrape_configs:\n  - job_name: kvserve\n    static_configs:\n"
                        "      - targets: ['127.0.0.1:%d']\n" % server.metrics_port)
            with lib.PrometheusProcess(config, tmp) as prom:
                def tokens():
                    result = prom.query("kvserve_request_generated_tokens_total")
                    if result and float(result[0]["value"][1]) == generated:
                        return result
                    return None
                result = lib.poll(tokens, 60, "the generated-token counter")
                self.assertEqual(result[0]["metric"]["job"], "kvserve")

                def ttft():
                    result = prom.query("histogram_quantile(0.5, "
                                        "kvserve_request_time_to_first_token_seconds_bucket)")
                    if result:
                        return float(result[0]["value"][1])
                    return None
                p50 = lib.poll(ttft, 30, "the TTFT quantile")
                self.assertTrue(math.isfinite(p50) and 0 < p50 < 10, p50)

                engine = lib.poll(lambda: prom.query("kvserve_kv_blocks_free") or None, 30,
                              "engine gauges")
                self.assertGreater(float(engine[0]["value"][1]), 0)

if __name__ == "__main__":
    lib.main(170)
