// kvserve-bench backend: prefill and decode throughput of each backend on one model, next
// to the machine's measured read bandwidth. See --help.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "backends/cpu_blas/blas_startup.h"
#include "backends/runtime_info.h"
#include "bench/bandwidth.h"
#include "bench/commands.h"
#include "bench/common_flags.h"
#include "bench/model_runner.h"
#include "bench/report.h"
#include "bench/tool_flags.h"
#include "common/stats.h"
#include "model/dtype.h"
#include "model/kv_layout.h"
#include "model/model.h"

using kvserve::bench::IntListFlag;

ABSL_FLAG(bool, weights_huge_pages, true,
          "Read the model file into huge-page-backed memory (as kvserve does by default) "
          "instead of mapping it.");
ABSL_FLAG(std::vector<std::string>, backends, (std::vector<std::string>{"reference", "cpu_blas"}),
          "Comma-separated backends; a backend that is not built is skipped with a warning.");
ABSL_FLAG(int32_t, prompt_tokens, 512, "Prefill prompt length; 0 skips prefill.");
ABSL_FLAG(int32_t, decode_tokens, 32, "Decode steps per measurement.");
ABSL_FLAG(int32_t, prefix_tokens, 4, "Tokens each sequence holds before decoding.");
ABSL_FLAG(IntListFlag, batches, IntListFlag({1, 4, 16, 64}),
          "Concurrent sequences for decode, comma-separated.");
ABSL_FLAG(int32_t, reference_repeats, 1,
          "The reference backend is scalar and slow on real shapes (s110m: a few tokens/s), "
          "so it uses the --reference-* values instead of --repeats, --decode-tokens, "
          "--prompt-tokens and --batches (counts are capped by the general values).");
ABSL_FLAG(int32_t, reference_decode_tokens, 4, "--decode-tokens of the reference backend.");
ABSL_FLAG(int32_t, reference_prompt_tokens, 64, "--prompt-tokens of the reference backend.");
ABSL_FLAG(IntListFlag, reference_batches, IntListFlag({1, 16}),
          "--batches of the reference backend.");
ABSL_FLAG(std::string, kernel_level, "",
          "cpu_blas kernel level (scalar, avx2, avx_vnni, avx512, avx512vnni, avx512bf16); empty = "
          "the "
          "best this CPU has. With a lower level, also set OPENBLAS_CORETYPE (e.g. Haswell) "
          "to measure an older CPU's sgemm.");
ABSL_FLAG(bool, batch_invariant, true,
          "cpu_blas: the same arithmetic for every row whatever the batch (as kvserve "
          "serves by default); false lets prefill use OpenBLAS sgemm.");
ABSL_FLAG(bool, quant_panels, true,
          "cpu_blas: q4_0, q8_0, q4_K and q6_K projections in 16-row panels (from avx2), "
          "as kvserve's --quant_panels; false measures the row-major kernels.");
ABSL_FLAG(bool, quant_unpack, true,
          "cpu_blas: q6_K panels unpacked once per slab for many rows, as kvserve's "
          "--quant_unpack; false measures the packed passes.");
ABSL_FLAG(std::string, bf16_panel_kernel, "auto",
          "cpu_blas: the kernel of the bf16 panels (auto, dpbf16, fma), as kvserve's "
          "--bf16_panel_kernel.");
ABSL_FLAG(int32_t, bandwidth_mib, 1024, "Bandwidth probe buffer in MiB; 0 skips the probe.");
ABSL_FLAG(int32_t, bandwidth_passes, 5, "Bandwidth probe passes; the best counts.");
ABSL_FLAG(int32_t, paired_probe_mib, 256,
          "Before each timed decode repeat, probe the bandwidth again (this many MiB, best of 2 "
          "passes) and report the median of the per-repeat ratios as \"% of bw\": on a shared "
          "machine the bandwidth left to us drifts within a minute. 0 = compare against the one "
          "probe at the start; off when --bandwidth-mib is 0.");

namespace {

using kvserve::bench::Measurement;

constexpr char kUsage[] = R"(Usage: kvserve-bench backend --model FILE [flags]

Measures, in one run: the machine's read bandwidth, then for each backend prefill
tokens/s (one prompt), decode tokens/s at batch 1 and aggregate decode tokens/s at
larger batches (each sequence has its own short prefix, then one token per sequence per
step, all sequences in one Batch). Token ids are random: the run never stops at an
end-of-sequence token (--ignore-eos is implied). Reports medians over repeats and the
ratios between backends, to the bandwidth bound and between batch sizes.
Flags accept - or _ (--prompt-tokens or --prompt_tokens).)";

// The flags, checked: counts and batch sizes in range, --kv-dtype known.
struct Flags {
  std::string model;
  std::string tokenizer;
  bool weights_huge_pages = true;
  bool batch_invariant = true;
  bool quant_panels = true;
  bool quant_unpack = true;
  std::string bf16_panel_kernel;
  std::string kernel_level;
  std::vector<std::string> backends;
  int threads = 0;
  int repeats = 0;
  int prompt_tokens = 0;
  int decode_tokens = 0;
  int prefix_tokens = 0;
  std::vector<int> batches;
  std::vector<int> reference_batches;
  int reference_repeats = 0;
  int reference_decode_tokens = 0;
  int reference_prompt_tokens = 0;
  kvserve::model::DType kv_dtype = kvserve::model::DType::kF16;
  int block_tokens = 0;
  int bandwidth_mib = 0;
  int bandwidth_passes = 0;
  int paired_probe_mib = 0;
  uint64_t seed = 0;
  bool json = false;
};

absl::StatusOr<Flags> FlagsFromCommandLine() {
  Flags f;
  f.model = absl::GetFlag(FLAGS_model);
  if (f.model.empty()) return absl::InvalidArgumentError("--model is required");
  f.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  f.weights_huge_pages = absl::GetFlag(FLAGS_weights_huge_pages);
  f.batch_invariant = absl::GetFlag(FLAGS_batch_invariant);
  f.quant_panels = absl::GetFlag(FLAGS_quant_panels);
  f.quant_unpack = absl::GetFlag(FLAGS_quant_unpack);
  f.bf16_panel_kernel = absl::GetFlag(FLAGS_bf16_panel_kernel);
  f.kernel_level = absl::GetFlag(FLAGS_kernel_level);
  for (const std::string& name : absl::GetFlag(FLAGS_backends)) {
    if (!name.empty()) f.backends.push_back(name);
  }
  constexpr int kMax = 1'000'000;
  if (absl::Status s = kvserve::bench::ReadCounts({
          {"threads", absl::GetFlag(FLAGS_threads).value_or(2), 1, kMax, &f.threads},
          {"repeats", absl::GetFlag(FLAGS_repeats), 1, kMax, &f.repeats},
          {"prompt_tokens", absl::GetFlag(FLAGS_prompt_tokens), 0, kMax, &f.prompt_tokens},
          {"decode_tokens", absl::GetFlag(FLAGS_decode_tokens), 1, kMax, &f.decode_tokens},
          {"prefix_tokens", absl::GetFlag(FLAGS_prefix_tokens), 1, kMax, &f.prefix_tokens},
          {"reference_repeats", absl::GetFlag(FLAGS_reference_repeats), 1, kMax,
           &f.reference_repeats},
          {"reference_decode_tokens", absl::GetFlag(FLAGS_reference_decode_tokens), 1, kMax,
           &f.reference_decode_tokens},
          {"reference_prompt_tokens", absl::GetFlag(FLAGS_reference_prompt_tokens), 0, kMax,
           &f.reference_prompt_tokens},
          {"block_tokens", absl::GetFlag(FLAGS_block_tokens), 1, kMax, &f.block_tokens},
          {"bandwidth_mib", absl::GetFlag(FLAGS_bandwidth_mib), 0, kMax, &f.bandwidth_mib},
          {"bandwidth_passes", absl::GetFlag(FLAGS_bandwidth_passes), 0, kMax, &f.bandwidth_passes},
          {"paired_probe_mib", absl::GetFlag(FLAGS_paired_probe_mib), 0, kMax, &f.paired_probe_mib},
      });
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          kvserve::bench::ReadIntList("batches", absl::GetFlag(FLAGS_batches), 1, 4096, &f.batches);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          kvserve::bench::ReadIntList("reference_batches", absl::GetFlag(FLAGS_reference_batches),
                                      1, 4096, &f.reference_batches);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<kvserve::model::DType> kv_dtype =
      kvserve::model::KvDTypeFromName(absl::GetFlag(FLAGS_kv_dtype), "--kv_dtype");
  if (!kv_dtype.ok()) return kv_dtype.status();
  f.kv_dtype = *kv_dtype;
  f.seed = absl::GetFlag(FLAGS_seed).value_or(1);
  f.json = absl::GetFlag(FLAGS_json);
  return f;
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

absl::Status Run(const Flags& flags, const kvserve::backends::cpu_blas::BlasCoreDecision& blas) {
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

  // Measured as kvserve serves it: a model for the cpu_blas backend alone is loaded
  // with its projections in panels where the backend reads them (engine::LoadModel).
  const model::PanelTypes panels =
      flags.backends == std::vector<std::string>{"cpu_blas"}
          ? backends::BackendReadsPanels(
                "cpu_blas", backends::BackendOptions{.threads = flags.threads,
                                                     .quant_panels = flags.quant_panels,
                                                     .kernel_level = flags.kernel_level})
          : model::PanelTypes{};
  absl::StatusOr<std::unique_ptr<model::Model>> loaded = model::Model::Load(
      flags.model, flags.tokenizer,
      model::LoadOptions{
          .huge_pages = flags.weights_huge_pages, .panels = panels, .pack_threads = flags.threads});
  if (!loaded.ok()) return loaded.status();
  const model::Model& mdl = **loaded;
  const model::KvLayout layout =
      model::KvLayout::ForModel(mdl.config(), flags.block_tokens, flags.kv_dtype);
  const uint64_t bytes_per_token =
      bench::WeightBytesPerToken(mdl.weights(), mdl.config().n_experts_used);
  const std::string dtype(model::DTypeName(bench::MatrixDType(mdl.weights())));

  for (const std::string& name : flags.backends) {
    backends::BackendOptions options;
    options.threads = flags.threads;
    options.batch_invariant = flags.batch_invariant;
    options.quant_panels = flags.quant_panels;
    options.quant_unpack = flags.quant_unpack;
    options.bf16_panel_kernel = flags.bf16_panel_kernel;
    options.kernel_level = flags.kernel_level;
    absl::StatusOr<std::unique_ptr<backends::Backend>> backend =
        backends::CreateBackend(name, mdl, layout, options);
    if (absl::IsNotFound(backend.status())) {
      std::fprintf(stderr, "kvserve-bench backend: skipping backend %s: %s\n", name.c_str(),
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
      std::fprintf(stderr, "kvserve-bench backend: prompt capped at the context length %d\n",
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
    const backends::RuntimeInfo runtime = backends::DescribeRuntime(name, blas);
    // (A level forced with --kernel-level is the one measured.)
    base.kernel_level = name == "cpu_blas" && !flags.kernel_level.empty() ? flags.kernel_level
                                                                          : runtime.kernel_level;
    base.blas_core = runtime.blas_core;
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

namespace kvserve::bench {

Subcommand BackendCommand() {
  return {
      .name = "backend",
      .summary = "prefill and decode tokens/s of each backend on one model, with the bandwidth",
      .usage = kUsage,
      .file = __FILE__,
      .shared_flags = {{"model", "GGUF or llama2.c model file. Required."},
                       {"tokenizer", "llama2.c tokenizer, for .bin models."},
                       {"threads", "Backend and bandwidth-probe threads.", "2"},
                       {"repeats"},
                       {"kv_dtype"},
                       {"block_tokens"},
                       {"seed", "Token id seed.", "1"},
                       {"json",
                        "One JSON object per measurement and line, nothing else on stdout."},
                       {"blas_reexec"},
                       {"ignore_eos", "Accepted for symmetry with generate; always in effect.",
                        "true"}},
      .run =
          [](char** argv) {
            // Once the flags are parsed (may re-execute this process).
            const backends::cpu_blas::BlasCoreDecision blas =
                backends::cpu_blas::EnsureBestBlasCore("kvserve-bench backend",
                                                       absl::GetFlag(FLAGS_blas_reexec), argv);
            const absl::StatusOr<Flags> flags = FlagsFromCommandLine();
            return flags.ok() ? Run(*flags, blas) : flags.status();
          },
  };
}

}  // namespace kvserve::bench
