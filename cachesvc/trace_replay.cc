#include "cachesvc/trace_replay.h"

#include <cctype>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::cachesvc {
namespace {

// A strict reader of the JSON subset a trace line needs: the values of the known keys are
// extracted, everything else is validated and skipped.
class LineParser {
 public:
  explicit LineParser(std::string_view text) : text_(text) {}

  absl::StatusOr<TraceRequest> Parse() {
    TraceRequest req;
    bool have_timestamp = false, have_hash_ids = false, have_input = false, have_output = false;
    SkipSpace();
    if (!Eat('{')) return Error("expected '{'");
    SkipSpace();
    if (!Eat('}')) {
      while (true) {
        SkipSpace();
        std::string key;
        if (absl::Status s = ReadString(&key); !s.ok()) return s;
        SkipSpace();
        if (!Eat(':')) return Error("expected ':'");
        SkipSpace();
        absl::Status s;
        if (key == "timestamp") {
          s = Once(&have_timestamp, key);
          if (s.ok()) s = ReadInt(key, &req.timestamp_ms);
        } else if (key == "input_length") {
          s = Once(&have_input, key);
          if (s.ok()) s = ReadInt(key, &req.input_length);
        } else if (key == "output_length") {
          s = Once(&have_output, key);
          if (s.ok()) s = ReadInt(key, &req.output_length);
        } else if (key == "hash_ids") {
          s = Once(&have_hash_ids, key);
          if (s.ok()) s = ReadIdArray(&req.hash_ids);
        } else {
          s = SkipValue(0);
        }
        if (!s.ok()) return s;
        SkipSpace();
        if (Eat(',')) continue;
        if (Eat('}')) break;
        return Error("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the object");
    if (!have_timestamp) return Error("missing \"timestamp\"");
    if (!have_hash_ids) return Error("missing \"hash_ids\"");
    return req;
  }

 private:
  static constexpr int kMaxDepth = 64;

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " at column ", pos_ + 1));
  }
  absl::Status Once(bool* seen, std::string_view key) const {
    if (*seen) return Error(absl::StrCat("duplicate \"", std::string(key), "\""));
    *seen = true;
    return absl::OkStatus();
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\n')) {
      ++pos_;
    }
  }
  bool Eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool AtDigit() const { return pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; }

  // A JSON string; escapes are checked and kept as written (keys we match have none).
  absl::Status ReadString(std::string* out) {
    if (!Eat('"')) return Error("expected a string");
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      if (c == '\\') {
        if (pos_ >= text_.size()) break;
        const char e = text_[pos_++];
        if (e == 'u') {
          for (int i = 0; i < 4; ++i, ++pos_) {
            if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
              return Error("bad \\u escape");
            }
          }
        } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
          return Error("bad escape in a string");
        }
        out->push_back('\\');
        out->push_back(e);
        continue;
      }
      out->push_back(c);
    }
    return Error("unterminated string");
  }

  // A non-negative integer that fits in uint64 (no sign, fraction or exponent).
  absl::Status ReadUint(std::string_view what, uint64_t* out) {
    if (!AtDigit())
      return Error(absl::StrCat(std::string(what), ": expected a non-negative integer"));
    uint64_t v = 0;
    while (AtDigit()) {
      const uint64_t d = static_cast<uint64_t>(text_[pos_] - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) {
        return Error(absl::StrCat(std::string(what), ": integer out of range"));
      }
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      return Error(absl::StrCat(std::string(what), ": expected an integer"));
    }
    *out = v;
    return absl::OkStatus();
  }
  absl::Status ReadInt(std::string_view what, int64_t* out) {
    uint64_t v = 0;
    if (absl::Status s = ReadUint(what, &v); !s.ok()) return s;
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(absl::StrCat(std::string(what), ": integer out of range"));
    }
    *out = static_cast<int64_t>(v);
    return absl::OkStatus();
  }
  absl::Status ReadIdArray(std::vector<uint64_t>* out) {
    if (!Eat('[')) return Error("hash_ids: expected an array");
    SkipSpace();
    if (Eat(']')) return absl::OkStatus();
    while (true) {
      SkipSpace();
      uint64_t id = 0;
      if (absl::Status s = ReadUint("hash_ids", &id); !s.ok()) return s;
      out->push_back(id);
      SkipSpace();
      if (Eat(',')) continue;
      if (Eat(']')) return absl::OkStatus();
      return Error("hash_ids: expected ',' or ']'");
    }
  }
  absl::Status SkipValue(int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    if (pos_ >= text_.size()) return Error("expected a value");
    const char c = text_[pos_];
    if (c == '"') {
      std::string ignored;
      return ReadString(&ignored);
    }
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      SkipSpace();
      if (Eat(close)) return absl::OkStatus();
      while (true) {
        SkipSpace();
        if (c == '{') {
          std::string ignored;
          if (absl::Status s = ReadString(&ignored); !s.ok()) return s;
          SkipSpace();
          if (!Eat(':')) return Error("expected ':'");
          SkipSpace();
        }
        if (absl::Status s = SkipValue(depth + 1); !s.ok()) return s;
        SkipSpace();
        if (Eat(',')) continue;
        if (Eat(close)) return absl::OkStatus();
        return Error(absl::StrCat("expected ',' or '", std::string(1, close), "'"));
      }
    }
    for (std::string_view word : {"true", "false", "null"}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return absl::OkStatus();
      }
    }
    // A number: -?digits(.digits)?([eE][+-]?digits)?
    Eat('-');
    if (!AtDigit()) return Error("expected a value");
    while (AtDigit()) ++pos_;
    if (Eat('.')) {
      if (!AtDigit()) return Error("bad number");
      while (AtDigit()) ++pos_;
    }
    if (Eat('e') || Eat('E')) {
      if (!Eat('+')) Eat('-');
      if (!AtDigit()) return Error("bad number");
      while (AtDigit()) ++pos_;
    }
    return absl::OkStatus();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

BlockHash TraceKey(uint64_t id) { return BlockHash{id, 0}; }

}  // namespace

absl::StatusOr<TraceRequest> ParseTraceLine(std::string_view line) {
  return LineParser(line).Parse();
}

std::string FormatTraceLine(const TraceRequest& req) {
  std::string line =
      absl::StrCat("{\"timestamp\": ", req.timestamp_ms, ", \"input_length\": ", req.input_length,
                   ", \"output_length\": ", req.output_length, ", \"hash_ids\": [");
  for (size_t i = 0; i < req.hash_ids.size(); ++i) {
    absl::StrAppend(&line, i == 0 ? "" : ", ", req.hash_ids[i]);
  }
  line += "]}";
  return line;
}

absl::StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path, int64_t max_requests) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open trace ", path));
  std::vector<TraceRequest> trace;
  std::string line;
  int64_t line_number = 0;
  while ((max_requests <= 0 || static_cast<int64_t>(trace.size()) < max_requests) &&
         std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    absl::StatusOr<TraceRequest> req = ParseTraceLine(line);
    if (!req.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": ", req.status().message()));
    }
    trace.push_back(*std::move(req));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading trace ", path));
  return trace;
}

absl::StatusOr<ReplayResult> Replay(std::span<const TraceRequest> trace,
                                    const ReplayOptions& options) {
  if (options.capacity_blocks == 0) {
    return absl::InvalidArgumentError("Replay: capacity_blocks must be > 0");
  }
  BlockIndexOptions index_options;
  index_options.capacity_bytes = options.capacity_blocks;
  index_options.policy = options.policy;
  if (options.reuse_credit_ticks >= 0) {
    index_options.reuse_credit_ticks = options.reuse_credit_ticks;
  }
  if (options.history_blocks >= 0) index_options.history_blocks = options.history_blocks;
  if (options.conversation_credit_ticks >= 0) {
    index_options.conversation_credit_ticks = options.conversation_credit_ticks;
  }
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = BlockIndex::Create(index_options);
  if (!index.ok()) return index.status();
  const BlockHash partition{};
  ReplayResult result;
  std::vector<BlockHash> chain;
  const absl::Time start = absl::Now();
  for (const TraceRequest& req : trace) {
    const absl::Time now = absl::FromUnixMillis(req.timestamp_ms);
    chain.clear();
    for (uint64_t id : req.hash_ids) chain.push_back(TraceKey(id));
    ++result.requests;
    result.blocks += static_cast<int64_t>(chain.size());
    result.hit_blocks += (*index)->LongestPrefix(partition, chain, now, /*touch=*/false);
    std::optional<BlockHash> parent;
    for (const BlockHash& key : chain) {
      absl::StatusOr<InsertResult> r = (*index)->Insert(partition, key, parent, 1, now);
      if (!r.ok()) return r.status();
      result.evicted_blocks += static_cast<int64_t>(r->evicted.size());
      if (r->outcome == InsertOutcome::kNoRoom) {
        ++result.no_room_requests;
        break;
      }
      if (r->outcome == InsertOutcome::kInserted) ++result.inserted_blocks;
      parent = key;
    }
    (*index)->EndRequest(partition, chain, now);
  }
  result.elapsed = absl::Now() - start;
  return result;
}

absl::StatusOr<ReplayResult> ReplayOptimum(std::span<const TraceRequest> trace,
                                           const ReplayOptions& options) {
  if (options.capacity_blocks == 0) {
    return absl::InvalidArgumentError("ReplayOptimum: capacity_blocks must be > 0");
  }
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  // next_use[r][j]: the index of the next request after r holding block j of request r.
  std::vector<std::vector<int64_t>> next_use(trace.size());
  {
    absl::flat_hash_map<uint64_t, int64_t> seen_at;  // id -> the later request holding it
    for (size_t r = trace.size(); r-- > 0;) {
      next_use[r].resize(trace[r].hash_ids.size());
      for (size_t j = 0; j < trace[r].hash_ids.size(); ++j) {
        auto [it, fresh] = seen_at.try_emplace(trace[r].hash_ids[j], static_cast<int64_t>(r));
        next_use[r][j] = fresh ? kNever : it->second;
        it->second = static_cast<int64_t>(r);
      }
    }
  }
  // Stored blocks by eviction order: the last element goes first (farthest next use, then
  // deepest).
  using Slot = std::tuple<int64_t, size_t, uint64_t>;  // (next use, depth, id)
  std::set<Slot> order;
  absl::flat_hash_map<uint64_t, Slot> stored;
  ReplayResult result;
  const absl::Time start = absl::Now();
  for (size_t r = 0; r < trace.size(); ++r) {
    const std::vector<uint64_t>& ids = trace[r].hash_ids;
    ++result.requests;
    result.blocks += static_cast<int64_t>(ids.size());
    size_t hits = 0;
    while (hits < ids.size() && stored.contains(ids[hits])) ++hits;
    result.hit_blocks += static_cast<int64_t>(hits);
    for (size_t j = 0; j < ids.size(); ++j) {
      const Slot slot{next_use[r][j], j, ids[j]};
      if (auto it = stored.find(ids[j]); it != stored.end()) {
        order.erase(it->second);
        order.insert(slot);
        it->second = slot;
        continue;
      }
      if (stored.size() >= options.capacity_blocks) {
        if (slot >= *order.rbegin()) continue;  // the new block would go first: not stored
        const Slot victim = *order.rbegin();
        order.erase(std::prev(order.end()));
        stored.erase(std::get<2>(victim));
        ++result.evicted_blocks;
      }
      order.insert(slot);
      stored.emplace(ids[j], slot);
      ++result.inserted_blocks;
    }
  }
  result.elapsed = absl::Now() - start;
  return result;
}

}  // namespace kvserve::cachesvc
