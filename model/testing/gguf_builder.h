// Test-only: assembles GGUF bytes, valid or deliberately broken, and a tiny llama model.
#ifndef KVSERVE_MODEL_TESTING_GGUF_BUILDER_H_
#define KVSERVE_MODEL_TESTING_GGUF_BUILDER_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::model::testing {

// Appends little-endian encodings to a byte vector.
class ByteWriter {
 public:
  template <typename T>
  ByteWriter& Put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
    return *this;
  }
  ByteWriter& PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
    return *this;
  }
  ByteWriter& PutBytes(const std::vector<uint8_t>& b) {
    out_.insert(out_.end(), b.begin(), b.end());
    return *this;
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// Builds a GGUF file from metadata entries and tensors, in insertion order. Nothing
// is validated: tests use it to produce broken files on purpose.
class GgufBuilder {
 public:
  struct Tensor {
    std::string name;
    uint32_t ggml_type = 0;
    std::vector<uint64_t> ne;  // ne[0] = columns
    std::vector<uint8_t> data;
    std::optional<uint64_t> offset_override;  // default: next aligned offset
  };

  GgufBuilder& SetVersion(uint32_t v) {
    version_ = v;
    return *this;
  }
  // Used for padding and offsets; also write general.alignment to change it in the file.
  GgufBuilder& SetLayoutAlignment(uint64_t a) {
    alignment_ = a;
    return *this;
  }

  // Sets `key` to an encoded value of GGUF type `type` (replacing an earlier value
  // of the same key in place).
  GgufBuilder& SetRaw(const std::string& key, uint32_t type, std::vector<uint8_t> value) {
    for (Entry& e : entries_) {
      if (e.key == key) {
        e.type = type;
        e.value = std::move(value);
        return *this;
      }
    }
    entries_.push_back({key, type, std::move(value)});
    return *this;
  }
  // Appends without replacing (for duplicate-key tests).
  GgufBuilder& AppendRaw(const std::string& key, uint32_t type, std::vector<uint8_t> value) {
    entries_.push_back({key, type, std::move(value)});
    return *this;
  }
  GgufBuilder& Remove(const std::string& key) {
    std::erase_if(entries_, [&](const Entry& e) { return e.key == key; });
    return *this;
  }

  GgufBuilder& SetU32(const std::string& key, uint32_t v) { return SetRaw(key, 4, Enc(v)); }
  GgufBuilder& SetI32(const std::string& key, int32_t v) { return SetRaw(key, 5, Enc(v)); }
  GgufBuilder& SetF32(const std::string& key, float v) { return SetRaw(key, 6, Enc(v)); }
  GgufBuilder& SetBool(const std::string& key, bool v) {
    return SetRaw(key, 7, Enc<uint8_t>(v ? 1 : 0));
  }
  GgufBuilder& SetString(const std::string& key, std::string_view v) {
    ByteWriter w;
    w.PutString(v);
    return SetRaw(key, 8, w.bytes());
  }
  GgufBuilder& SetStringArray(const std::string& key, const std::vector<std::string>& v) {
    ByteWriter w;
    w.Put<uint32_t>(8).Put<uint64_t>(v.size());
    for (const std::string& s : v) w.PutString(s);
    return SetRaw(key, 9, w.bytes());
  }
  GgufBuilder& SetF32Array(const std::string& key, const std::vector<float>& v) {
    ByteWriter w;
    w.Put<uint32_t>(6).Put<uint64_t>(v.size());
    for (float f : v) w.Put(f);
    return SetRaw(key, 9, w.bytes());
  }
  GgufBuilder& SetI32Array(const std::string& key, const std::vector<int32_t>& v) {
    ByteWriter w;
    w.Put<uint32_t>(5).Put<uint64_t>(v.size());
    for (int32_t i : v) w.Put(i);
    return SetRaw(key, 9, w.bytes());
  }

  GgufBuilder& AddTensor(Tensor t) {
    tensors_.push_back(std::move(t));
    return *this;
  }
  GgufBuilder& AddF32Tensor(const std::string& name, std::vector<uint64_t> ne,
                            const std::vector<float>& values) {
    Tensor t{name, 0, std::move(ne), {}, std::nullopt};
    t.data.resize(values.size() * 4);
    std::memcpy(t.data.data(), values.data(), t.data.size());
    return AddTensor(std::move(t));
  }
  GgufBuilder& RemoveTensor(const std::string& name) {
    std::erase_if(tensors_, [&](const Tensor& t) { return t.name == name; });
    return *this;
  }
  // nullptr when absent.
  Tensor* FindTensor(const std::string& name) {
    for (Tensor& t : tensors_) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }

  std::vector<uint8_t> Build() const {
    ByteWriter w;
    w.Put<uint32_t>(0x46554747u).Put<uint32_t>(version_);  // "GGUF"
    w.Put<uint64_t>(tensors_.size()).Put<uint64_t>(entries_.size());
    for (const Entry& e : entries_) {
      w.PutString(e.key).Put<uint32_t>(e.type).PutBytes(e.value);
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const Tensor& t : tensors_) {
      const uint64_t offset = t.offset_override.value_or(next);
      offsets.push_back(next);
      next = AlignUp(next + t.data.size());
      w.PutString(t.name).Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t n : t.ne) w.Put(n);
      w.Put<uint32_t>(t.ggml_type).Put<uint64_t>(offset);
    }
    std::vector<uint8_t>& out = w.bytes();
    const size_t data_start = AlignUp(out.size());
    out.resize(data_start, 0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(data_start + offsets[i], 0);
      out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
    }
    return out;
  }

 private:
  struct Entry {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> value;
  };

  template <typename T>
  static std::vector<uint8_t> Enc(T v) {
    std::vector<uint8_t> b(sizeof(T));
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
  }
  uint64_t AlignUp(uint64_t n) const { return (n + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

// Shape of the tiny llama model MakeTinyLlamaGguf() writes.
struct TinyLlamaShape {
  static constexpr int kDim = 8, kLayers = 2, kHeads = 2, kKvHeads = 1, kFfn = 12, kVocab = 6,
                       kContext = 16;
  static constexpr int kHeadDim = kDim / kHeads, kKvDim = kKvHeads * kHeadDim;
};

// Deterministic, distinct values so views can be checked element by element.
inline std::vector<float> TestValues(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = seed + static_cast<float>(static_cast<int>(i % 29) - 14) / 64.0f;
  return v;
}

// A valid llama GGUF (v3, tied embeddings, f32) of TinyLlamaShape: about 5 KB.
inline GgufBuilder MakeTinyLlamaGguf() {
  using S = TinyLlamaShape;
  GgufBuilder b;
  b.SetString("general.architecture", "llama")
      .SetString("general.name", "tiny")
      .SetU32("llama.context_length", S::kContext)
      .SetU32("llama.embedding_length", S::kDim)
      .SetU32("llama.feed_forward_length", S::kFfn)
      .SetU32("llama.attention.head_count", S::kHeads)
      .SetU32("llama.attention.head_count_kv", S::kKvHeads)
      .SetU32("llama.block_count", S::kLayers)
      .SetU32("llama.rope.dimension_count", S::kHeadDim)
      .SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .SetString("tokenizer.ggml.model", "llama")
      .SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<0x41>",
                                                "\xe2\x96\x81"
                                                "a",
                                                "b"})
      .SetF32Array("tokenizer.ggml.scores", {0, 0, 0, 0, -1, -2})
      .SetI32Array("tokenizer.ggml.token_type", {2, 3, 3, 6, 1, 1})
      .SetU32("tokenizer.ggml.bos_token_id", 1)
      .SetU32("tokenizer.ggml.eos_token_id", 2)
      .SetU32("tokenizer.ggml.unknown_token_id", 0);
  float seed = 0.0f;
  auto add = [&](const std::string& name, uint64_t cols, uint64_t rows) {
    seed += 1.0f;
    if (rows == 1) {
      b.AddF32Tensor(name, {cols}, TestValues(cols, seed));
    } else {
      b.AddF32Tensor(name, {cols, rows}, TestValues(cols * rows, seed));
    }
  };
  add("token_embd.weight", S::kDim, S::kVocab);
  add("output_norm.weight", S::kDim, 1);
  for (int l = 0; l < S::kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", S::kDim, 1);
    add(p + "attn_q.weight", S::kDim, S::kDim);
    add(p + "attn_k.weight", S::kDim, S::kKvDim);
    add(p + "attn_v.weight", S::kDim, S::kKvDim);
    add(p + "attn_output.weight", S::kDim, S::kDim);
    add(p + "ffn_norm.weight", S::kDim, 1);
    add(p + "ffn_gate.weight", S::kDim, S::kFfn);
    add(p + "ffn_up.weight", S::kDim, S::kFfn);
    add(p + "ffn_down.weight", S::kFfn, S::kDim);
  }
  return b;
}

}  // namespace kvserve::model::testing

#endif  // KVSERVE_MODEL_TESTING_GGUF_BUILDER_H_
