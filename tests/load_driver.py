"""A closed-loop load driver for the reliability tests: `concurrency` client threads, each
running one kind of conversation against a real kvserve over and over until a stop time,
recording every call's status, time to first token, the gaps between streamed messages
and the greedy outputs. Also: /metrics scraping, resident-memory sampling, percentiles.

Used by load_soak_test.py (200 streams for 60 s and more) and fault_matrix_test.py.
"""
import collections
import random
import threading
import time
import urllib.request

import grpc

import kvserve_testlib as lib
from kvserve.v1 import inference_pb2 as pb

# Prompts of different lengths (stories260K is a TinyStories model); greedy outputs of one
# prompt must agree with each other whatever else runs beside them.
PROMPTS = [
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    "One day, a big dog went to the park. He saw a ball and",
    "Tom and his mom went to the store to buy some food. Tom wanted",
    "The sun was shining and the birds were singing. A little boy named Tim",
    ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
     "the sun with her big red ball. One day, she went to the park with her mom. "
     "She saw a big tree and"),
]


UNAVAILABLE_BACKOFF_S = 0.05


def greedy(text, max_tokens, session_id=""):
    return pb.GenerateRequest(text=text, max_tokens=max_tokens, session_id=session_id,
                              sampling=pb.SamplingParams(temperature=0.0))


class Stats:
    """What the clients saw. Thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.codes = collections.Counter()          # (method, code name) -> calls
        self.malformed = []                         # descriptions of bad answers
        self.ttft_s = []
        self.gaps_s = []                            # per token: message gap / tokens in it
        self.outputs = collections.defaultdict(set)  # prompt index -> greedy texts
        self.cached_turns = 0                       # session turns >= 2 with cached tokens
        self.later_turns = 0                        # session turns >= 2
        self.tokens = 0
        self.events = []  # (monotonic end time, method, code name, details) of each call

    def record(self, method, code, details="", **kw):
        with self.lock:
            self.codes[(method, code.name)] += 1
            self.events.append((time.monotonic(), method, code.name, details))
            for key, value in kw.items():
                if key == "ttft":
                    self.ttft_s.append(value)
                elif key == "gaps":
                    self.gaps_s.extend(value)
                elif key == "tokens":
                    self.tokens += value
                elif key == "output":
                    self.outputs[value[0]].add(value[1])
                elif key == "malformed":
                    self.malformed.append(value)

    def count(self, method, code_name):
        with self.lock:
            return self.codes[(method, code_name)]

    def total(self, method):
        with self.lock:
            return sum(n for (m, _), n in self.codes.items() if m == method)

    def inconsistent_outputs(self):
        """Prompts whose greedy outputs are not all prefixes of the longest one."""
        bad = {}
        with self.lock:
            for prompt, texts in self.outputs.items():
                longest = max(texts, key=len)
                if any(not longest.startswith(t) for t in texts):
                    bad[prompt] = sorted(texts, key=len)
        return bad


def check_error(stats, method, error):
    """Records a failed call; RESOURCE_EXHAUSTED must carry the retry hint. After a
    retryable status the calling thread backs off for UNAVAILABLE_BACKOFF_S, as a
    retrying client does (a client that retries at once only measures its own loop)."""
    code = error.code()
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
        time.sleep(UNAVAILABLE_BACKOFF_S)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        trailers = dict(error.trailing_metadata() or ())
        if "grpc-retry-pushback-ms" not in trailers or "retry-after" not in trailers:
            stats.record(method, code, malformed="RESOURCE_EXHAUSTED without retry hint: %s"
                         % error.details())
            return
    stats.record(method, code, details=error.details() or "")


def run_stream(stubs, stats, request, prompt_index=None, timeout=60.0, cancel_after_first=False):
    """One GenerateStream call; returns its final Usage or None."""
    start = time.monotonic()
    last = None
    gaps = []
    text = []
    usage = None
    ttft = None
    tokens = 0
    call = stubs.generate_stream(request, timeout=timeout)
    try:
        for message in call:
            now = time.monotonic()
            n = len(message.token_ids)
            if last is None:
                ttft = now - start
            elif n > 0:
                gaps.extend([(now - last) / n] * n)
            last = now
            tokens += n
            text.append(message.text)
            if message.HasField("usage"):
                usage = message.usage
            if cancel_after_first:
                call.cancel()
                break
    except grpc.RpcError as e:
        check_error(stats, "GenerateStream", e)
        return None
    if cancel_after_first:
        stats.record("GenerateStream", grpc.StatusCode.CANCELLED)
        return None
    kw = {"gaps": gaps, "tokens": tokens}
    if ttft is not None:
        kw["ttft"] = ttft
    if prompt_index is not None:
        kw["output"] = (prompt_index, "".join(text))
    if usage is None:
        kw["malformed"] = "stream ended OK without usage"
    stats.record("GenerateStream", grpc.StatusCode.OK, **kw)
    return usage


def stateless_streams(stubs, stats, rng, done):
    """Loop body: independent greedy streams over PROMPTS until done()."""
    while not done():
        i = rng.randrange(len(PROMPTS))
        run_stream(stubs, stats, greedy(PROMPTS[i], rng.randint(16, 48)), prompt_index=i)


def conversations(stubs, stats, rng, done, turns=3):
    """Loop body: open a session, run `turns` streamed turns, close it; until done()."""
    while not done():
        try:
            session = stubs.open_session(pb.OpenSessionRequest(), timeout=30)
            stats.record("OpenSession", grpc.StatusCode.OK)
        except grpc.RpcError as e:
            check_error(stats, "OpenSession", e)
            continue
        first = rng.randrange(len(PROMPTS))
        for turn in range(turns):
            # The first turn's greedy answer is the stateless one for its prompt.
            text, index = (PROMPTS[first], first) if turn == 0 else (" Then", None)
            usage = run_stream(stubs, stats, greedy(text, rng.randint(8, 24), session.session_id),
                               prompt_index=index)
            if usage is None:
                break
            if turn > 0:
                with stats.lock:
                    stats.later_turns += 1
                    if usage.cached_tokens_local + usage.cached_tokens_remote > 0:
                        stats.cached_turns += 1
        try:
            stubs.close_session(pb.CloseSessionRequest(session_id=session.session_id), timeout=30)
            stats.record("CloseSession", grpc.StatusCode.OK)
        except grpc.RpcError as e:
            check_error(stats, "CloseSession", e)


def run_load(target, body, concurrency, seconds, stats, channels=4, seed=1, stop=None):
    """Runs `body(stubs, stats, rng, done)` on `concurrency` threads over `channels`
    channels for `seconds` (or until the threading.Event `stop` is set); returns once every
    thread has finished its last call."""
    chans = [grpc.insecure_channel(target) for _ in range(channels)]
    stop_time = time.monotonic() + seconds

    def done():
        return time.monotonic() >= stop_time or (stop is not None and stop.is_set())
    threads = []
    for i in range(concurrency):
        stubs = lib.Inference(chans[i % channels])
        rng = random.Random(seed * 100003 + i)
        t = threading.Thread(target=body, args=(stubs, stats, rng, done), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=seconds + 120)
    for c in chans:
        c.close()
    alive = sum(t.is_alive() for t in threads)
    if alive:
        raise AssertionError("%d load threads still running" % alive)


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100.0 * len(ordered)))]


class RssSampler:
    """Samples a process's resident size every `interval` seconds until stop()."""

    def __init__(self, pid, interval=0.5):
        self.pid, self.interval = pid, interval
        self.samples = []  # (seconds since start, bytes)
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self.interval):
            self.samples.append((time.monotonic() - self._start, lib.rss_bytes(self.pid)))

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.samples


def scrape(port):
    """/metrics as {(name, ((label, value), ...)): value}."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        if "{" in head:
            name, labels = head[:-1].split("{", 1)
            pairs = tuple(sorted(tuple(p.split("=", 1)) for p in split_labels(labels)))
            pairs = tuple((k, v.strip('"')) for k, v in pairs)
        else:
            name, pairs = head, ()
        out[(name, pairs)] = float(value)
    return out


def split_labels(labels):
    parts, depth, cur = [], False, ""
    for ch in labels:
        if ch == '"':
            depth = not depth
        if ch == "," and not depth:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def metric(metrics, name, **labels):
    """One sample's value (0 when absent)."""
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


def served_calls(before, after, method, code_name):
    """Calls of `method` the server finished with `code_name` ("OK", as Python's grpc
    names codes) between two scrapes."""
    labels = {"method": method, "code": code_name.lower()}
    return (metric(after, "kvserve_rpc_requests_total", **labels) -
            metric(before, "kvserve_rpc_requests_total", **labels))


def histogram_quantile(metrics, name, q):
    """The upper bound of the bucket holding quantile q of histogram `name` (no labels)."""
    buckets = sorted((float("inf") if dict(k)["le"] == "+Inf" else float(dict(k)["le"]), v)
                     for (n, k), v in metrics.items() if n == name + "_bucket")
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    rank = q * buckets[-1][1]
    for le, count in buckets:
        if count >= rank:
            return le
    return float("inf")


def wait_idle(port, timeout=60.0):
    """Waits until the engine runs and queues nothing; returns the last scrape."""
    end = time.monotonic() + timeout
    while True:
        m = scrape(port)
        if (metric(m, "kvserve_engine_requests_running") == 0 and
                metric(m, "kvserve_engine_requests_waiting") == 0):
            return m
        if time.monotonic() > end:
            raise AssertionError("engine not idle after %.0f s" % timeout)
        time.sleep(0.1)
