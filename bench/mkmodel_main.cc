// kvserve-mkmodel: writes a llama GGUF with seeded random weights at a preset shape.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/synthetic_model.h"
#include "model/dtype.h"

namespace {

constexpr char kUsage[] =
    R"(usage: kvserve-mkmodel --preset NAME --dtype f32|f16|bf16|q8_0 --out FILE [--seed N]

Writes a valid llama GGUF (loadable by kvserve and llama.cpp) with random weights,
approximately N(0, 0.02^2), norm gains 1.0, and a byte-fallback SentencePiece vocabulary.
Presets: tiny (tests), s110m, smol135m (tied embeddings), tl1b. Same seed, same bytes.
)";

struct Flags {
  std::string preset;
  std::string dtype;
  std::string out;
  uint64_t seed = 1;
};

absl::Status ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
    }
    if (arg == "--preset") {
      f.preset = value;
    } else if (arg == "--dtype") {
      f.dtype = value;
    } else if (arg == "--out") {
      f.out = value;
    } else if (arg == "--seed") {
      const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), f.seed);
      if (ec != std::errc() || ptr != value.data() + value.size()) {
        return absl::InvalidArgumentError("--seed: bad number " + value);
      }
    } else {
      return absl::InvalidArgumentError("unknown argument " + arg);
    }
  }
  if (f.preset.empty() || f.dtype.empty() || f.out.empty()) {
    return absl::InvalidArgumentError("--preset, --dtype and --out are required");
  }
  return absl::OkStatus();
}

absl::Status Run(const Flags& flags) {
  namespace bench = kvserve::bench;
  namespace model = kvserve::model;
  absl::StatusOr<model::ModelConfig> config = bench::PresetConfig(flags.preset);
  if (!config.ok()) return config.status();
  bench::SyntheticModelOptions options;
  options.config = *config;
  options.seed = flags.seed;
  options.name = absl::StrCat("kvserve-synthetic-", flags.preset);
  if (flags.dtype == "f32") {
    options.dtype = model::DType::kF32;
  } else if (flags.dtype == "f16") {
    options.dtype = model::DType::kF16;
  } else if (flags.dtype == "bf16") {
    options.dtype = model::DType::kBF16;
  } else if (flags.dtype == "q8_0") {
    options.dtype = model::DType::kQ8_0;
  } else {
    return absl::InvalidArgumentError("--dtype must be f32, f16, bf16 or q8_0, not " + flags.dtype);
  }
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = bench::WriteSyntheticModel(options, flags.out); !s.ok()) return s;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "kvserve-mkmodel: wrote %s (%s, %s) in %.1f s\n", flags.out.c_str(),
               flags.preset.c_str(), flags.dtype.c_str(), seconds);
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
    std::fprintf(stderr, "kvserve-mkmodel: %s\n\n%s", std::string(s.message()).c_str(), kUsage);
    return 2;
  }
  if (absl::Status s = Run(flags); !s.ok()) {
    std::fprintf(stderr, "kvserve-mkmodel: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
