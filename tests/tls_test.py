"""TLS and mutual TLS on the real binaries, with certificates made by `openssl` here.

- kvserve with TLS: a client trusting the CA works, a plaintext client is refused;
  kvserve-cli with --tls-ca works.
- Mutual TLS: no client certificate and a certificate of another CA are refused, the
  right one (and kvserve-cli with --tls-cert/--tls-key) is accepted; health needs it too.
- A replaced certificate file is served to new connections after --tls-refresh-interval
  while a channel opened before keeps working.
- Bad files at start-up: exit 2 with a message naming the file.
- kvserve-cache with mutual TLS used by two kvserve replicas over --session-cache-tls-*:
  a session's second turn on the other replica fetches its history remotely.
- /metrics over HTTPS (--metrics-tls-cert/--metrics-tls-key).

Skips when `openssl` is not installed.

Usage: /usr/bin/python3 tls_test.py KVSERVE_BIN CACHE_BIN CLI_BIN MODEL PYTHON_STUBS_DIR
"""
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import grpc

KVSERVE, CACHE, CLI, MODEL, PYDIR = sys.argv[1:6]
del sys.argv[1:6]

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import kvserve_testlib as lib  # noqa: E402

lib.add_python_stubs(PYDIR)
from kvserve.v1 import inference_pb2 as pb  # noqa: E402
from kvserve.v1 import session_cache_pb2 as cpb  # noqa: E402

OPENSSL = shutil.which("openssl")
READINESS = "kvserve.v1.Inference"


def run_openssl(*args, cwd):
    subprocess.run([OPENSSL] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=30)


class Certs:
    """A CA, server certificates for 127.0.0.1/localhost (two: "server-a", "server-b"),
    a client certificate, and a rogue CA with its own client certificate; all P-256."""

    def __init__(self, folder):
        self.dir = folder
        self._ca("ca")
        self._ca("rogue-ca")
        san = "subjectAltName=DNS:localhost,IP:127.0.0.1"
        self._leaf("server-a", "ca", san)
        self._leaf("server-b", "ca", san)
        self._leaf("client", "ca", "extendedKeyUsage=clientAuth")
        self._leaf("rogue-client", "rogue-ca", "extendedKeyUsage=clientAuth")

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def _ca(self, name):
        run_openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", name + ".key", "-out", name + ".pem", "-days", "2",
                    "-subj", "/CN=" + name, cwd=self.dir)

    def _leaf(self, name, ca, extension):
        with open(self.path(name + ".ext"), "w") as f:
            f.write(extension + "\n")
        run_openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name,
                    cwd=self.dir)
        run_openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey",
                    ca + ".key", "-CAcreateserial", "-out", name + ".pem", "-days", "2",
                    "-extfile", name + ".ext", cwd=self.dir)

    def channel_credentials(self, client=None, ca="ca"):
        key = self.read(client + ".key") if client else None
        chain = self.read(client + ".pem") if client else None
        return grpc.ssl_channel_credentials(root_certificates=self.read(ca + ".pem"),
                                            private_key=key, certificate_chain=chain)

    def peer_common_name(self, port, client=None):
        """The CN of the certificate a new TLS connection to `port` is served."""
        context = ssl.create_default_context(cafile=self.path("ca.pem"))
        context.set_alpn_protocols(["h2"])
        if client:
            context.load_cert_chain(self.path(client + ".pem"), self.path(client + ".key"))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            subject = dict(item[0] for item in tls.getpeercert()["subject"])
            return subject["commonName"]


def healthy(channel):
    return lib.health_status(channel, READINESS) == 1


def server_tls_args(certs, server="server-a", client_ca=None):
    args = ["--tls-cert", certs.path(server + ".pem"), "--tls-key", certs.path(server + ".key")]
    if client_ca:
        args += ["--tls-client-ca", certs.path(client_ca + ".pem")]
    return args


@unittest.skipIf(OPENSSL is None, "SKIPPED: openssl is not installed")
class TlsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvserve-tls-")
        cls.certs = Certs(cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_refused(self, channel):
        with self.assertRaises(grpc.RpcError) as cm:
            healthy(channel)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_tls_works_and_plaintext_is_refused(self):
        c = self.certs
        with lib.KvserveProcess(KVSERVE, MODEL, server_tls_args(c)) as server:
            with grpc.secure_channel(server.target(), c.channel_credentials()) as ch:
                self.assertTrue(healthy(ch))
                ids = ch.unary_unary("/kvserve.v1.Inference/Tokenize",
                                     request_serializer=pb.TokenizeRequest.SerializeToString,
                                     response_deserializer=pb.TokenizeResponse.FromString)(
                    pb.TokenizeRequest(text="Once upon a time"), timeout=10)
                self.assertGreater(len(ids.token_ids), 0)
            with grpc.insecure_channel(server.target()) as ch:
                self.assert_refused(ch)
            # A client trusting another CA does not accept the server.
            with grpc.secure_channel(server.target(), c.channel_credentials(ca="rogue-ca")) as ch:
                self.assert_refused(ch)
            cli = subprocess.run([CLI, "info", "--target", server.target(),
                                  "--tls-ca", c.path("ca.pem")],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(cli.returncode, 0, cli.stderr)
            plain = subprocess.run([CLI, "info", "--target", server.target(), "--timeout", "3s"],
                                   capture_output=True, text=True, timeout=60)
            self.assertNotEqual(plain.returncode, 0)

    def test_http_api_serves_https_with_the_same_certificate(self):
        c = self.certs
        with lib.KvserveProcess(KVSERVE, MODEL, server_tls_args(c)) as server:
            url = "https://127.0.0.1:%d/v1/models" % server.http_port
            context = ssl.create_default_context(cafile=c.path("ca.pem"))
            with urllib.request.urlopen(url, context=context, timeout=10) as r:
                self.assertEqual(r.status, 200)
                self.assertEqual(json.load(r)["object"], "list")
            # Plain HTTP, or a client trusting another CA, gets nothing.
            with self.assertRaises(Exception):
                urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % server.http_port,
                                       timeout=5).read()
            rogue = ssl.create_default_context(cafile=c.path("rogue-ca.pem"))
            with self.assertRaisesRegex(urllib.error.URLError, "CERTIFICATE_VERIFY_FAILED"):
                urllib.request.urlopen(url, context=rogue, timeout=5)
        # Mutual TLS is the gRPC port's only: kvserve refuses to start it with the HTTP API on.
        r = subprocess.run([KVSERVE, "--model", MODEL, "--listen", "127.0.0.1:0",
                            "--metrics-listen", "", "--http-listen", "127.0.0.1:0"] +
                           server_tls_args(c, client_ca="ca"),
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--tls-client-ca: mutual TLS is available on the gRPC port only", r.stderr)

    def test_mutual_tls_refuses_clients_without_the_right_certificate(self):
        c = self.certs
        # Mutual TLS is the gRPC port's only: the HTTP API is turned off.
        with lib.KvserveProcess(KVSERVE, MODEL, server_tls_args(c, client_ca="ca") +
                                ["--http-listen", ""]) as server:
            with grpc.secure_channel(server.target(), c.channel_credentials()) as ch:
                self.assert_refused(ch)  # no client certificate
            with grpc.secure_channel(server.target(),
                                     c.channel_credentials("rogue-client")) as ch:
                self.assert_refused(ch)  # signed by another CA
            with grpc.insecure_channel(server.target()) as ch:
                self.assert_refused(ch)
            with grpc.secure_channel(server.target(), c.channel_credentials("client")) as ch:
                self.assertTrue(healthy(ch))
            cli = subprocess.run([CLI, "info", "--target", server.target(),
                                  "--tls-ca", c.path("ca.pem"), "--tls-cert", c.path("client.pem"),
                                  "--tls-key", c.path("client.key")],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(cli.returncode, 0, cli.stderr)
            no_cert = subprocess.run([CLI, "info", "--target", server.target(), "--timeout", "3s",
                                      "--tls-ca", c.path("ca.pem")],
                                     capture_output=True, text=True, timeout=60)
            self.assertNotEqual(no_cert.returncode, 0)

    def test_replaced_certificate_is_served_and_open_channels_keep_working(self):
        c = self.certs
        live = tempfile.mkdtemp(prefix="live-", dir=self.tmp)
        cert, key = os.path.join(live, "tls.pem"), os.path.join(live, "tls.key")
        shutil.copy(c.path("server-a.pem"), cert)
        shutil.copy(c.path("server-a.key"), key)
        args = ["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", c.path("ca.pem"),
                "--tls-refresh-interval", "1s", "--http-listen", ""]
        with lib.KvserveProcess(KVSERVE, MODEL, args) as server, \
                grpc.secure_channel(server.target(), c.channel_credentials("client")) as old:
            self.assertTrue(healthy(old))
            self.assertEqual(c.peer_common_name(server.port, "client"), "server-a")
            # Replace both files atomically (write beside, rename over).
            for src, dst in ((c.path("server-b.key"), key), (c.path("server-b.pem"), cert)):
                shutil.copy(src, dst + ".new")
                os.rename(dst + ".new", dst)
            lib.wait_for(lambda: c.peer_common_name(server.port, "client") == "server-b",
                     timeout=15, what="the replaced certificate")
            # The channel opened before the change still works.
            for _ in range(3):
                self.assertTrue(healthy(old))
            with grpc.secure_channel(server.target(), c.channel_credentials("client")) as new:
                self.assertTrue(healthy(new))
            # A broken replacement: gRPC 1.51 then fails new handshakes (README), but open
            # channels keep working, and a good file is served again on the next refresh.
            with open(cert + ".new", "w") as f:
                f.write("not a certificate\n")
            os.rename(cert + ".new", cert)
            time.sleep(3)  # three refresh intervals (wall clock: gRPC's own timer)
            self.assertTrue(healthy(old))
            shutil.copy(c.path("server-a.pem"), cert + ".new")
            shutil.copy(c.path("server-a.key"), key + ".new")
            os.rename(key + ".new", key)
            os.rename(cert + ".new", cert)
            lib.wait_for(lambda: c.peer_common_name(server.port, "client") == "server-a",
                     timeout=15, what="the repaired certificate")
            self.assertTrue(healthy(old))

    def test_bad_files_fail_start_up_naming_the_file(self):
        c = self.certs
        garbage = os.path.join(self.tmp, "garbage.pem")
        with open(garbage, "w") as f:
            f.write("not a certificate\n")
        cases = [
            (["--tls-cert", garbage, "--tls-key", c.path("server-a.key")], garbage),
            (["--tls-cert", c.path("server-a.pem"), "--tls-key", c.path("server-b.key")],
             c.path("server-b.key")),  # the key of another certificate
            (["--tls-cert", c.path("server-a.pem"), "--tls-key", garbage], garbage),
            (server_tls_args(c) + ["--tls-client-ca", garbage], garbage),
            (["--tls-cert", os.path.join(self.tmp, "missing.pem"), "--tls-key",
              c.path("server-a.key")], "missing.pem"),
            (["--tls-cert", c.path("server-a.pem")], "key"),
            (["--metrics-tls-cert", c.path("server-a.pem"), "--metrics-tls-key", garbage],
             garbage),
            (["--session-cache", "127.0.0.1:1", "--session-cache-tls-ca", garbage], garbage),
        ]
        for args, needle in cases:
            for binary in (KVSERVE, CACHE):
                if binary == CACHE and args[0] == "--session-cache":
                    continue
                full = [binary, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
                if binary == KVSERVE:
                    full += ["--http-listen", "127.0.0.1:0"]
                if binary == KVSERVE:
                    full += ["--model", MODEL]
                r = subprocess.run(full + args, capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 2, (binary, args, r.stdout, r.stderr))
                self.assertIn(needle, r.stderr, (binary, args))
        r = subprocess.run([CLI, "info", "--tls-ca", garbage], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn(garbage, r.stderr)

    def test_session_cache_over_mutual_tls(self):
        c = self.certs
        cache_args = server_tls_args(c, client_ca="ca") + ["--memory-bytes", str(64 << 20)]
        with lib.CacheProcess(CACHE, cache_args) as cache, \
                grpc.secure_channel(cache.target(), c.channel_credentials("client")) as cch:
            get_session = cch.unary_unary(
                "/kvserve.v1.SessionCache/GetSession",
                request_serializer=cpb.GetSessionRecordRequest.SerializeToString,
                response_deserializer=cpb.SessionRecord.FromString)
            with grpc.insecure_channel(cache.target()) as plain:
                self.assert_refused(plain)
            with grpc.secure_channel(cache.target(), c.channel_credentials()) as no_cert:
                self.assert_refused(no_cert)
            self.assertEqual(lib.health_status(cch, "kvserve.v1.SessionCache"), 1)
            replica_args = ["--session-cache", cache.target(), "--session-cache-timeout", "2s",
                            "--session-cache-tls-ca", c.path("ca.pem"),
                            "--session-cache-tls-cert", c.path("client.pem"),
                            "--session-cache-tls-key", c.path("client.key")]
            with lib.KvserveProcess(KVSERVE, MODEL, replica_args) as a, \
                    lib.KvserveProcess(KVSERVE, MODEL, replica_args) as b:
                with grpc.insecure_channel(a.target()) as ch:
                    session = ch.unary_unary(
                        "/kvserve.v1.Inference/OpenSession",
                        request_serializer=pb.OpenSessionRequest.SerializeToString,
                        response_deserializer=pb.Session.FromString)(
                        pb.OpenSessionRequest(), timeout=10)
                    first = generate(ch, "Once upon a time, there was a little girl named Lily. "
                                     "She loved to play outside in the sun.",
                                     session.session_id, 40)
                history = first.usage.prompt_tokens + first.usage.completion_tokens
                lib.wait_for(lambda: len(get_session(cpb.GetSessionRecordRequest(
                    session_id=session.session_id), timeout=5).tokens) == history,
                    what="the session record in the cache")
                with grpc.insecure_channel(b.target()) as ch:
                    got = generate(ch, " Then she saw a big dog.", session.session_id, 10)
                self.assertGreater(got.usage.cached_tokens_remote, 0)
                self.assertEqual(got.usage.cached_tokens_local, 0)

    def test_metrics_over_https(self):
        c = self.certs
        args = ["--metrics-tls-cert", c.path("server-a.pem"),
                "--metrics-tls-key", c.path("server-a.key")]
        with lib.KvserveProcess(KVSERVE, MODEL, args) as server:
            context = ssl.create_default_context(cafile=c.path("ca.pem"))
            url = "https://127.0.0.1:%d/metrics" % server.metrics_port
            with urllib.request.urlopen(url, context=context, timeout=10) as response:
                self.assertEqual(response.status, 200)
                self.assertIn(b"kvserve_", response.read())
            # Plain HTTP to the HTTPS port gets no metrics.
            with self.assertRaises(Exception):
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.metrics_port,
                                            timeout=10) as response:
                    response.read()
        with lib.CacheProcess(CACHE, args + ["--metrics-listen", "127.0.0.1:0"]) as cache:
            m = re.search(r"metrics port (\d+)", "".join(cache.lines))
            self.assertIsNotNone(m, cache.lines)
            context = ssl.create_default_context(cafile=c.path("ca.pem"))
            with urllib.request.urlopen("https://localhost:%s/metrics" % m.group(1),
                                        context=context, timeout=10) as response:
                self.assertEqual(response.status, 200)


def generate(channel, text, session_id, max_tokens):
    call = channel.unary_unary("/kvserve.v1.Inference/Generate",
                               request_serializer=pb.GenerateRequest.SerializeToString,
                               response_deserializer=pb.GenerateResponse.FromString)
    return call(pb.GenerateRequest(text=text, session_id=session_id, max_tokens=max_tokens,
                                   sampling=pb.SamplingParams(temperature=0.0)), timeout=60)


if __name__ == "__main__":
    lib.main(240)
