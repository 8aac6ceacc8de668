// kvserve-bench: prefill and decode throughput of each backend on one model, next to the
// machine's measured read bandwidth. See --help.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "backends/backend.h"
#include "bench/bandwidth.h"
#include "bench/model_runner.h"
#include "bench/report.h"
#include "common/stats.h"
#include "model/kv_layout.h"
#include "model/model.h"

namespace {

using kvserve::bench::Measurement;

constexpr char kUsage[] = R"(usage: kvserve-bench --model FILE [options]

Measures, in one run: the machine's read bandwidth, then for each backend prefill
tokens/s (one prompt), decode tokens/s at batch 1 and aggregate decode tokens/s at
larger batches (each sequence has its own short prefix, then one token per sequence per
step, all sequences in one Batch). Token ids are random: the run never stops at an
end-of-sequence token (--ignore-eos is implied). Reports medians over repeats and the
ratios between backends, to the bandwidth bound and between batch sizes.

  --model FILE              GGUF or llama2.c model (required)
  --tokenizer FILE          llama2.c tokenizer, for .bin models
  --backends LIST           comma-separated (default reference,cpu_blas); a backend
                            that is not built is skipped with a warning
  --threads N               backend and bandwidth-probe threads (default 2)
  --repeats R               timed runs per measurement; the median is reported (default 5)
  --prompt-tokens N         prefill prompt length, 0 to skip prefill (default 512)
  --decode-tokens N         decode steps per measurement (default 32)
  --prefix-tokens N         tokens each sequence holds before decoding (default 4)
  --batches LIST            concurrent sequences for decode (default 1,4,16,64)
  --reference-repeats R     the reference backend is scalar and slow on real shapes
  --reference-decode-tokens N   (s110m: a few tokens/s), so it uses these instead of
  --reference-prompt-tokens N   --repeats / --decode-tokens / --prompt-tokens / --batches
  --reference-batches LIST      (defaults 1, 4, 64 and 1,16; counts are capped by the
                            general values)
  --kv-dtype f32|f16        KV cache element type (default f32)
  --block-tokens N          positions per KV block (default 16)
  --bandwidth-mib N         bandwidth probe buffer, 0 to skip the probe (default 1024)
  --bandwidth-passes N      probe passes, the best counts (default 5)
  --paired-probe-mib N      before each timed decode repeat, probe the bandwidth again
                            (N MiB, best of 2 passes) and report the median of the
                            per-repeat ratios as "% of bw": on a shared machine the
                            bandwidth left to us drifts within a minute (default 256;
                            0 = compare against the one probe at the start; off when
                            --bandwidth-mib is 0)
  --seed N                  token id seed (default 1)
  --json                    one JSON object per measurement and line, nothing else on stdout
  --ignore-eos              accepted; always in effect
)";

struct Flags {
  std::string model;
  std::string tokenizer;
  std::vector<std::string> backends = {"reference", "cpu_blas"};
  int threads = 2;
  int repeats = 5;
  int prompt_tokens = 512;
  int decode_tokens = 32;
  int prefix_tokens = 4;
  std::vector<int> batches = {1, 4, 16, 64};
  std::vector<int> reference_batches = {1, 16};
  int reference_repeats = 1;
  int reference_decode_tokens = 4;
  int reference_prompt_tokens = 64;
  std::string kv_dtype = "f32";
  int block_tokens = 16;
  int bandwidth_mib = 1024;
  int bandwidth_passes = 5;
  int paired_probe_mib = 256;
  uint64_t seed = 1;
  bool json = false;
};

bool ParseInt(std::string_view s, int64_t& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

absl::Status ParseFlags(int argc, char** argv, Flags& f) {
  std::map<std::string, int*> ints = {
      {"threads", &f.threads},
      {"repeats", &f.repeats},
      {"prompt-tokens", &f.prompt_tokens},
      {"decode-tokens", &f.decode_tokens},
      {"prefix-tokens", &f.prefix_tokens},
      {"reference-repeats", &f.reference_repeats},
      {"reference-decode-tokens", &f.reference_decode_tokens},
      {"reference-prompt-tokens", &f.reference_prompt_tokens},
      {"block-tokens", &f.block_tokens},
      {"bandwidth-mib", &f.bandwidth_mib},
      {"bandwidth-passes", &f.bandwidth_passes},
      {"paired-probe-mib", &f.paired_probe_mib},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) return absl::InvalidArgumentError("unexpected argument " + arg);
    arg = arg.substr(2);
    if (arg == "json") {
      f.json = true;
      continue;
    }
    if (arg == "ignore-eos") continue;
    std::string value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", arg, " needs a value"));
    }
    int64_t n = 0;
    if (auto it = ints.find(arg); it != ints.end()) {
      if (!ParseInt(value, n) || n < 0 || n > 1'000'000) {
        return absl::InvalidArgumentError(absl::StrCat("--", arg, ": bad number ", value));
      }
      *it->second = static_cast<int>(n);
    } else if (arg == "model") {
      f.model = value;
    } else if (arg == "tokenizer") {
      f.tokenizer = value;
    } else if (arg == "backends") {
      f.backends = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (arg == "batches" || arg == "reference-batches") {
      std::vector<int>& list = arg == "batches" ? f.batches : f.reference_batches;
      list.clear();
      for (const std::string& b :
           std::vector<std::string>(absl::StrSplit(value, ',', absl::SkipEmpty()))) {
        if (!ParseInt(b, n) || n <= 0 || n > 4096) {
          return absl::InvalidArgumentError(absl::StrCat("--", arg, ": bad batch size ", b));
        }
        list.push_back(static_cast<int>(n));
      }
    } else if (arg == "kv-dtype") {
      f.kv_dtype = value;
    } else if (arg == "seed") {
      if (!ParseInt(value, n) || n < 0) return absl::InvalidArgumentError("--seed: bad number");
      f.seed = static_cast<uint64_t>(n);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", arg));
    }
  }
  if (f.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (f.threads <= 0 || f.repeats <= 0 || f.decode_tokens <= 0 || f.prefix_tokens <= 0 ||
      f.reference_repeats <= 0 || f.reference_decode_tokens <= 0 || f.block_tokens <= 0) {
    return absl::InvalidArgumentError(
        "--threads, --repeats, --decode-tokens, --prefix-tokens, --block-tokens and the "
        "--reference-* counts must be positive");
  }
  if (f.kv_dtype != "f32" && f.kv_dtype != "f16") {
    return absl::InvalidArgumentError("--kv-dtype must be f32 or f16");
  }
  return absl::OkStatus();
}

void Emit(const Flags& flags, const Measurement& m, std::vector<Measurement>& all) {
  if (flags.json) {
    std::printf("%s\n", kvserve::bench::MeasurementJson(m).c_str());
    std::fflush(stdout);
  } else if (m.test == "bandwidth") {
    std::fprintf(stderr, "  read bandwidth: %.1f GB/s (best of %d)\n", m.summary.max, m.repeats);
  } else {
    std::fprintf(stderr, "  %s %s batch %d: %.1f tok/s (median of %d)\n", m.backend.c_str(),
                 m.test.c_str(), m.batch, m.summary.median, m.repeats);
  }
  all.push_back(m);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::Status Run(const Flags& flags) {
  namespace backends = kvserve::backends;
  namespace bench = kvserve::bench;
  namespace model = kvserve::model;
  std::vector<Measurement> all;
  double bandwidth_gbs = 0.0;
  if (flags.bandwidth_mib > 0) {
    bench::BandwidthOptions bo;
    bo.threads = flags.threads;
    bo.buffer_bytes = static_cast<size_t>(flags.bandwidth_mib) << 20;
    bo.passes = std::max(1, flags.bandwidth_passes);
    absl::StatusOr<bench::BandwidthResult> bw = bench::MeasureReadBandwidth(bo);
    if (!bw.ok()) return bw.status();
    bandwidth_gbs = bw->best_gbs;
    Measurement m;
    m.model = BaseName(flags.model);
    m.detail = absl::StrCat(bw->kernel, " loads, ", flags.bandwidth_mib, " MiB buffer");
    m.threads = flags.threads;
    m.test = "bandwidth";
    m.repeats = bo.passes;
    m.summary.count = bo.passes;
    m.summary.median = bw->median_gbs;
    m.summary.max = bw->best_gbs;
    m.summary.min = bw->worst_gbs;
    m.bandwidth_gbs = bw->best_gbs;
    Emit(flags, m, all);
  }

  absl::StatusOr<std::unique_ptr<model::Model>> loaded =
      model::Model::Load(flags.model, flags.tokenizer);
  if (!loaded.ok()) return loaded.status();
  const model::Model& mdl = **loaded;
  const model::KvLayout layout =
      model::KvLayout::ForModel(mdl.config(), flags.block_tokens,
                                flags.kv_dtype == "f16" ? model::DType::kF16 : model::DType::kF32);
  const uint64_t bytes_per_token = bench::WeightBytesPerToken(mdl.weights());
  const std::string dtype(model::DTypeName(bench::MatrixDType(mdl.weights())));

  for (const std::string& name : flags.backends) {
    backends::BackendOptions options;
    options.threads = flags.threads;
    absl::StatusOr<std::unique_ptr<backends::Backend>> backend =
        backends::CreateBackend(name, mdl, layout, options);
    if (absl::IsNotFound(backend.status())) {
      std::fprintf(stderr, "kvserve-bench: skipping backend %s: %s\n", name.c_str(),
                   std::string(backend.status().message()).c_str());
      continue;
    }
    if (!backend.ok()) return backend.status();
    const bool reference = name == "reference";
    const int repeats =
        reference ? std::min(flags.reference_repeats, flags.repeats) : flags.repeats;
    const int decode_tokens = reference
                                  ? std::min(flags.reference_decode_tokens, flags.decode_tokens)
                                  : flags.decode_tokens;
    int prompt_tokens = reference ? std::min(flags.reference_prompt_tokens, flags.prompt_tokens)
                                  : flags.prompt_tokens;
    if (prompt_tokens > mdl.config().context_length) {
      std::fprintf(stderr, "kvserve-bench: prompt capped at the context length %d\n",
                   mdl.config().context_length);
      prompt_tokens = mdl.config().context_length;
    }

    Measurement base;
    base.model = BaseName(flags.model);
    base.backend = name;
    base.dtype = dtype;
    base.threads = flags.threads;
    base.repeats = repeats;
    base.bytes_per_token = bytes_per_token;
    base.bandwidth_gbs = bandwidth_gbs;
    if (prompt_tokens > 0) {
      absl::StatusOr<std::vector<double>> s =
          bench::MeasurePrefill(**backend, mdl, prompt_tokens, repeats, flags.seed);
      if (!s.ok()) return s.status();
      Measurement m = base;
      m.test = "prefill";
      m.batch = 1;
      m.tokens = prompt_tokens;
      m.summary = kvserve::common::Summarize(*s);
      Emit(flags, m, all);
    }
    for (int batch : reference ? flags.reference_batches : flags.batches) {
      Measurement m = base;
      m.test = "decode";
      m.batch = batch;
      m.tokens = decode_tokens;
      if (flags.paired_probe_mib > 0 && flags.bandwidth_mib > 0) {
        std::vector<double> tps, probes, fractions;
        for (int r = 0; r < repeats; ++r) {
          bench::BandwidthOptions bo;
          bo.threads = flags.threads;
          bo.buffer_bytes = static_cast<size_t>(flags.paired_probe_mib) << 20;
          bo.passes = 2;
          absl::StatusOr<bench::BandwidthResult> bw = bench::MeasureReadBandwidth(bo);
          if (!bw.ok()) return bw.status();
          absl::StatusOr<std::vector<double>> s = bench::MeasureDecode(
              **backend, mdl, batch, flags.prefix_tokens, decode_tokens, 1, flags.seed + 1);
          if (!s.ok()) return s.status();
          tps.push_back(s->front());
          probes.push_back(bw->best_gbs);
          fractions.push_back(s->front() / batch * static_cast<double>(bytes_per_token) / 1e9 /
                              bw->best_gbs);
        }
        m.summary = kvserve::common::Summarize(tps);
        m.bandwidth_gbs = kvserve::common::Summarize(probes).median;
        m.paired_fraction = kvserve::common::Summarize(fractions).median;
      } else {
        absl::StatusOr<std::vector<double>> s = bench::MeasureDecode(
            **backend, mdl, batch, flags.prefix_tokens, decode_tokens, repeats, flags.seed + 1);
        if (!s.ok()) return s.status();
        m.summary = kvserve::common::Summarize(*s);
      }
      Emit(flags, m, all);
    }
  }
  if (!flags.json) std::printf("%s", bench::FormatReport(all).c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
  }
  Flags flags;
  if (absl::Status s = ParseFlags(argc, argv, flags); !s.ok()) {
    std::fprintf(stderr, "kvserve-bench: %s\n\n%s", std::string(s.message()).c_str(), kUsage);
    return 2;
  }
  if (absl::Status s = Run(flags); !s.ok()) {
    std::fprintf(stderr, "kvserve-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
