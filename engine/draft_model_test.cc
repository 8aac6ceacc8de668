// The draft model source: vocabulary checks, greedy proposals kept in step with the
// sequence across steps, turns and a small K/V pool, and through the engine: output
// unchanged whatever the draft model, every draft accepted when it is the target itself.
#include "engine/draft_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "engine/engine.h"
#include "engine/engine_options.h"
#include "engine/model_loading.h"
#include "engine/testing/engine_testing.h"
#include "engine/testing/small_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace kvserve::engine {
namespace {

using ::kvserve::engine::testing::CyclicPrompt;
using ::kvserve::engine::testing::GreedyRequest;
using ::kvserve::engine::testing::Result;
using ::kvserve::engine::testing::RunRequest;
using ::kvserve::engine::testing::SmallRandomModel;
using ::testing::HasSubstr;

model::Vocabulary SmallVocabulary() {
  model::Vocabulary v;
  v.pieces = {"<unk>", "<s>", "</s>", "\xe2\x96\x81the", "a"};
  v.scores = {0, 0, 0, -1, -2};
  v.kinds = {model::TokenKind::kUnknown, model::TokenKind::kControl, model::TokenKind::kControl,
             model::TokenKind::kNormal, model::TokenKind::kNormal};
  return v;
}

TEST(CheckDraftVocabularyTest, AcceptsTheSameVocabulary) {
  EXPECT_TRUE(CheckDraftVocabulary(SmallVocabulary(), SmallVocabulary()).ok());
}

TEST(CheckDraftVocabularyTest, NamesTheFirstDifference) {
  struct Case {
    std::string name;
    void (*change)(model::Vocabulary&);
    std::string message;
  };
  const std::vector<Case> cases = {
      {"text", [](model::Vocabulary& v) { v.pieces[3] = "the"; }, "text of token 3"},
      {"kind", [](model::Vocabulary& v) { v.kinds[4] = model::TokenKind::kUserDefined; },
       "kind of token 4"},
      {"size",
       [](model::Vocabulary& v) {
         v.pieces.push_back("b");
         v.scores.push_back(0);
         v.kinds.push_back(model::TokenKind::kNormal);
       },
       "number of tokens \"5\" vs \"6\""},
      {"bos", [](model::Vocabulary& v) { v.bos_id = 2; }, "BOS id"},
      {"eos", [](model::Vocabulary& v) { v.eos_id = 1; }, "EOS id"},
      {"model",
       [](model::Vocabulary& v) {
         v.model = model::TokenizerModel::kBytePairEncoding;
         v.tokenizer_model = "gpt2";
       },
       "tokenizer model \"llama\" vs \"gpt2\""},
      {"pre", [](model::Vocabulary& v) { v.pre_tokenizer = "qwen2"; }, "pre-tokenizer"},
  };
  for (const Case& c : cases) {
    model::Vocabulary draft = SmallVocabulary();
    c.change(draft);
    const absl::Status s = CheckDraftVocabulary(SmallVocabulary(), draft);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.name;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.name << ": " << s;
  }
}

// A backend for `model` with K/V blocks of `block_tokens` f16 positions.
std::unique_ptr<backends::Backend> MakeBackend(const model::Model& model,
                                               const std::string& backend_name,
                                               int block_tokens = 4) {
  auto backend = backends::CreateBackend(
      backend_name, model,
      model::KvLayout::ForModel(model.config(), block_tokens, model::DType::kF16),
      backends::BackendOptions{});
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? *std::move(backend) : nullptr;
}

// A draft model source over a copy of the small random model (seed `seed`). The default
// options draft as many tokens as asked (no confidence stop): the tests of the mechanism
// count on the lengths they ask for.
std::unique_ptr<DraftModelSource> MakeDraft(const model::Model& target, uint64_t seed,
                                            const std::string& backend_name,
                                            DraftModelOptions options = {}, int block_tokens = 4) {
  std::unique_ptr<model::Model> draft = SmallRandomModel(seed);
  std::unique_ptr<backends::Backend> backend = MakeBackend(*draft, backend_name, block_tokens);
  if (backend == nullptr) return nullptr;
  auto source = DraftModelSource::Create(target, std::move(draft), std::move(backend), options);
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? *std::move(source) : nullptr;
}

// Forwards to `draft` and checks each proposal against a draft model that computes the
// context from scratch: the one kept in step must propose exactly what it would.
class CheckedDraft final : public DraftSource {
 public:
  CheckedDraft(DraftModelSource* draft, std::unique_ptr<DraftModelSource> fresh)
      : draft_(draft), fresh_(std::move(fresh)) {}
  std::string_view name() const override { return draft_->name(); }
  bool PacesItself() const override { return draft_->PacesItself(); }
  void Propose(uint64_t request_id, std::span<const int32_t> context, int32_t max_tokens,
               std::vector<int32_t>* out) override {
    const size_t first = out->size();
    draft_->Propose(request_id, context, max_tokens, out);
    std::vector<int32_t> want;
    fresh_->Propose(++fresh_ids_, context, max_tokens, &want);
    fresh_->Forget(fresh_ids_);
    const std::vector<int32_t> got(out->begin() + static_cast<ptrdiff_t>(first), out->end());
    // A smaller proposal is allowed when the pool ran out; a different one is not.
    if (got.size() > want.size() || !std::equal(got.begin(), got.end(), want.begin())) {
      ++mismatches_;
    }
    proposed_ += static_cast<int64_t>(got.size());
  }
  void Prepare(uint64_t request_id, std::span<const int32_t> context) override {
    ++prepared_;
    draft_->Prepare(request_id, context);
  }
  void Forget(uint64_t request_id) override { draft_->Forget(request_id); }
  int prepared() const { return prepared_; }
  int mismatches() const { return mismatches_; }
  int64_t proposed() const { return proposed_; }

 private:
  DraftModelSource* draft_;
  std::unique_ptr<DraftModelSource> fresh_;
  uint64_t fresh_ids_ = 0;
  int mismatches_ = 0;
  int prepared_ = 0;
  int64_t proposed_ = 0;
};

Engine::Options SpeculativeOptions(DraftSource* source) {
  Engine::Options o;
  o.kv_budget_bytes = size_t{8} << 20;
  o.max_step_tokens = 64;
  o.block_tokens = 4;
  o.speculative.source = "draft_model";
  o.speculative.custom_source = source;
  o.speculative.adaptive = false;  // these tests check the mechanism
  return o;
}

class DraftModelSourceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { target_ = SmallRandomModel(); }
  std::unique_ptr<model::Model> target_;
};

// The target as its own draft: its greedy continuation, so every draft is accepted,
// step after step (the draft model follows the sequence: rolled back to what was
// accepted, fed what was sampled).
TEST_P(DraftModelSourceTest, TheTargetAsItsDraftHasEveryDraftAccepted) {
  auto plain = testing::MakeEngine(*target_, SpeculativeOptions(nullptr), GetParam());
  ASSERT_FALSE(plain.ok());  // draft_model without the loaded source is an error
  EXPECT_THAT(std::string(plain.status().message()), HasSubstr("needs the loaded draft model"));
  Engine::Options none = SpeculativeOptions(nullptr);
  none.speculative.source = "none";
  auto reference = testing::MakeEngine(*target_, none, GetParam());
  ASSERT_TRUE(reference.ok()) << reference.status();

  std::unique_ptr<DraftModelSource> draft = MakeDraft(*target_, 11, GetParam());
  ASSERT_NE(draft, nullptr);
  auto drafted = testing::MakeEngine(*target_, SpeculativeOptions(draft.get()), GetParam());
  ASSERT_TRUE(drafted.ok()) << drafted.status();
  for (int32_t salt : {0, 1, 2}) {
    const Request r = GreedyRequest(CyclicPrompt(20 + 9 * salt, salt), 40, /*top_logprobs=*/2);
    const Result want = RunRequest(**reference, r);
    const Result got = RunRequest(**drafted, r);
    ASSERT_TRUE(got.status.ok()) << got.status;
    EXPECT_EQ(got.tokens, want.tokens) << "salt " << salt;
    EXPECT_EQ(got.logprobs, want.logprobs);
    EXPECT_GT(got.usage.draft_tokens, 20) << "salt " << salt;
    EXPECT_EQ(got.usage.draft_tokens_accepted, got.usage.draft_tokens) << "salt " << salt;
  }
}

// Another model as the draft: most drafts rejected, the output unchanged, also with
// several sequences at once and a draft K/V pool too small for all of them; every
// proposal what the draft model proposes from scratch (kept in step through
// rejections, chunks and evictions).
TEST_P(DraftModelSourceTest, AnotherModelLeavesTheOutputUnchanged) {
  Engine::Options none = SpeculativeOptions(nullptr);
  none.speculative.source = "none";
  auto reference = testing::MakeEngine(*target_, none, GetParam());
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (int64_t kv_bytes : {int64_t{4} << 20, int64_t{0}}) {
    DraftModelOptions options;
    // 0: the pool of the least blocks that hold one sequence of this test (46 positions
    // + drafts): the sequences take each other's blocks.
    const size_t block_bytes =
        model::KvLayout::ForModel(target_->config(), 4, model::DType::kF16).block_bytes();
    options.kv_bytes = kv_bytes > 0 ? kv_bytes : static_cast<int64_t>(block_bytes) * 14;
    options.max_chunk_tokens = 7;  // prompts fed in several chunks
    std::unique_ptr<DraftModelSource> draft = MakeDraft(*target_, 12, GetParam(), options);
    ASSERT_NE(draft, nullptr);
    DraftModelOptions forgetful;
    forgetful.max_kept_sequences = 0;
    CheckedDraft checked(draft.get(), MakeDraft(*target_, 12, GetParam(), forgetful));
    Engine::Options o = SpeculativeOptions(&checked);
    o.speculative.max_batch = 8;
    auto drafted = testing::MakeEngine(*target_, o, GetParam());
    ASSERT_TRUE(drafted.ok()) << drafted.status();
    std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
    std::vector<Request> requests;
    for (int32_t salt = 0; salt < 4; ++salt) {
      requests.push_back(GreedyRequest(CyclicPrompt(10 + 3 * salt, salt), 30));
      sinks.push_back(std::make_shared<testing::CollectingSink>());
      ASSERT_TRUE((*drafted)->Submit(requests.back(), sinks.back()).ok());
    }
    int64_t drafts = 0;
    for (size_t i = 0; i < sinks.size(); ++i) {
      const Result got = sinks[i]->Wait();
      ASSERT_TRUE(got.status.ok()) << got.status;
      EXPECT_EQ(got.tokens, RunRequest(**reference, requests[i]).tokens) << "sequence " << i;
      drafts += got.usage.draft_tokens;
    }
    EXPECT_GT(drafts, 0) << "kv_bytes " << options.kv_bytes;
    EXPECT_GT(checked.proposed(), 0);
    EXPECT_EQ(checked.mismatches(), 0) << "kv_bytes " << options.kv_bytes;
    EXPECT_EQ(checked.prepared(), 4);  // each sequence, at the end of its prompt
  }
}

// A follow-up turn continues the finished sequence's K/V in the draft model: only the
// new tokens are fed. A context the draft model cannot hold gets no proposal.
TEST_P(DraftModelSourceTest, FollowUpTurnsReuseTheDraftKv) {
  std::unique_ptr<DraftModelSource> draft = MakeDraft(*target_, 11, GetParam());
  ASSERT_NE(draft, nullptr);
  std::vector<int32_t> context = CyclicPrompt(30);
  std::vector<int32_t> out;
  draft->Propose(1, context, 4, &out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(draft->context_tokens_fed(), 30);
  // The target accepted two drafts and sampled another token.
  context.insert(context.end(), out.begin(), out.begin() + 2);
  context.push_back(5);
  std::vector<int32_t> again;
  draft->Propose(1, context, 3, &again);
  EXPECT_EQ(again.size(), 3u);
  EXPECT_EQ(draft->context_tokens_fed(), 31);  // the drafts were computed already
  draft->Forget(1);
  // The next turn, under another request id: its context extends the last one (and
  // not with the draft model's last proposal).
  context.insert(context.end(), {again[0] == 7 ? 6 : 7, 8, 9});
  std::vector<int32_t> next;
  draft->Propose(2, context, 2, &next);
  EXPECT_EQ(next.size(), 2u);
  EXPECT_EQ(draft->context_tokens_fed(), 34);  // the 3 new tokens only
  // The same proposal as a draft model that never saw the earlier turns.
  std::unique_ptr<DraftModelSource> fresh = MakeDraft(*target_, 11, GetParam());
  std::vector<int32_t> fresh_next;
  fresh->Propose(9, context, 2, &fresh_next);
  EXPECT_EQ(fresh_next, next);
  // Prepare computes the context but its last token, so Propose feeds only that one.
  std::vector<int32_t> prepared;
  fresh->Prepare(50, CyclicPrompt(40, 3));
  const int64_t fed = fresh->context_tokens_fed();
  fresh->Propose(50, CyclicPrompt(40, 3), 3, &prepared);
  EXPECT_EQ(fresh->context_tokens_fed(), fed + 1);
  std::unique_ptr<DraftModelSource> unprepared = MakeDraft(*target_, 11, GetParam());
  std::vector<int32_t> want;
  unprepared->Propose(50, CyclicPrompt(40, 3), 3, &want);
  EXPECT_EQ(prepared, want);
  // Beyond the draft model's context length (512): no proposal, no crash. At 512
  // positions one draft (the last is never fed), at 511 two.
  for (int n : {513, 512, 511}) {
    std::vector<int32_t> proposal;
    fresh->Propose(100 + static_cast<uint64_t>(n), CyclicPrompt(n), 3, &proposal);
    EXPECT_EQ(proposal.size(), static_cast<size_t>(std::max(0, 513 - n))) << n << " positions";
  }
}

// The lead of the draft model's greedy token over its runner-up (logits) at each of
// `drafts`, drafted after `context`: one Forward of context + drafts but the last.
std::vector<float> DraftLeads(const std::string& backend_name, uint64_t seed,
                              const std::vector<int32_t>& context,
                              const std::vector<int32_t>& drafts) {
  std::unique_ptr<model::Model> draft_model = SmallRandomModel(seed);
  std::unique_ptr<backends::Backend> backend = MakeBackend(*draft_model, backend_name);
  if (backend == nullptr) return {};
  std::vector<int32_t> tokens = context;
  tokens.insert(tokens.end(), drafts.begin(), drafts.end() - 1);
  const size_t block_bytes = backend->kv_layout().block_bytes();
  const size_t block_tokens = static_cast<size_t>(backend->kv_layout().block_tokens);
  const size_t blocks = (tokens.size() + block_tokens - 1) / block_tokens;
  std::vector<uint8_t> kv(blocks * block_bytes);
  std::vector<uint8_t*> block_ptrs;
  for (size_t b = 0; b < blocks; ++b) block_ptrs.push_back(kv.data() + b * block_bytes);
  backends::Batch batch;
  batch.sequences.resize(1);
  batch.sequences[0].tokens = tokens;
  batch.sequences[0].blocks = block_ptrs;
  batch.sequences[0].want_logits = true;
  batch.sequences[0].logits_rows = static_cast<int32_t>(drafts.size());
  const size_t vocab = static_cast<size_t>(draft_model->config().vocab_size);
  std::vector<float> logits(drafts.size() * vocab);
  EXPECT_TRUE(backend->Forward(batch, std::span<float>(logits)).ok());
  std::vector<float> leads;
  for (size_t i = 0; i < drafts.size(); ++i) {
    std::vector<float> row(logits.begin() + static_cast<ptrdiff_t>(i * vocab),
                           logits.begin() + static_cast<ptrdiff_t>((i + 1) * vocab));
    const auto best = std::max_element(row.begin(), row.end());
    EXPECT_EQ(best - row.begin(), drafts[i]) << "draft " << i;
    const float top = *best;
    *best = -std::numeric_limits<float>::infinity();
    leads.push_back(top - *std::max_element(row.begin(), row.end()));
  }
  return leads;
}

constexpr int32_t kDrafts = 8;

// Draft model 11's proposal of kDrafts tokens after a prompt (drafting as many as
// asked), with each token's lead (DraftLeads).
struct Proposal {
  std::vector<int32_t> context;
  std::vector<int32_t> tokens;
  std::vector<float> leads;
};
Proposal ProposeAll(const model::Model& target, const std::string& backend_name) {
  Proposal p;
  p.context = CyclicPrompt(12, 1);
  MakeDraft(target, 11, backend_name)->Propose(1, p.context, kDrafts, &p.tokens);
  EXPECT_EQ(p.tokens.size(), static_cast<size_t>(kDrafts));
  if (p.tokens.size() == static_cast<size_t>(kDrafts)) {
    p.leads = DraftLeads(backend_name, 11, p.context, p.tokens);
  }
  return p;
}

// The confidence stop: with min_margin just above the lead of the draft's greedy token
// over its runner-up at draft j, the proposal ends with draft j (the first whose lead
// is below it). The leads are computed here from one Forward of the whole proposal.
TEST_P(DraftModelSourceTest, ConfidenceStopEndsTheProposalAfterTheFirstNearTie) {
  const Proposal p = ProposeAll(*target_, GetParam());
  ASSERT_EQ(p.leads.size(), static_cast<size_t>(kDrafts));
  const std::vector<int32_t>& context = p.context;
  const std::vector<int32_t>& all = p.tokens;
  const std::vector<float>& leads = p.leads;
  EXPECT_FALSE(MakeDraft(*target_, 11, GetParam())->PacesItself());

  int stopped_inside = 0;
  for (int32_t j = 0; j + 1 < kDrafts; ++j) {
    DraftModelOptions options;
    options.min_margin = static_cast<double>(leads[static_cast<size_t>(j)]) * (1.0 + 1e-4) + 1e-7;
    // Expected: up to and including the first draft whose lead is below min_margin.
    size_t want = 0;
    while (want < kDrafts && (want == 0 || leads[want - 1] >= options.min_margin)) ++want;
    // Skip a threshold that another lead lies too close to for this check.
    if (std::any_of(leads.begin(), leads.end(), [&](float l) {
          return l != leads[static_cast<size_t>(j)] &&
                 std::abs(l - options.min_margin) < 1e-3 * options.min_margin;
        })) {
      continue;
    }
    std::unique_ptr<DraftModelSource> paced = MakeDraft(*target_, 11, GetParam(), options);
    EXPECT_TRUE(paced->PacesItself());
    std::vector<int32_t> got;
    paced->Propose(1, context, kDrafts, &got);
    EXPECT_EQ(got, std::vector<int32_t>(all.begin(), all.begin() + static_cast<ptrdiff_t>(want)))
        << "min_margin just above draft " << j << "'s lead " << leads[static_cast<size_t>(j)];
    stopped_inside += want > 1 && want < kDrafts ? 1 : 0;
  }
  EXPECT_GT(stopped_inside, 0) << "no threshold stopped the proposal inside it";
}

// The learnt confidence stop: the source records the outcome of each proposal when the
// sequence next asks (the context says which drafts it kept). Taught that drafts with
// draft j's lead are rejected (and those before it accepted), it stops after draft j.
TEST_P(DraftModelSourceTest, LearntConfidenceStopsAfterALeadThatIsUsuallyRejected) {
  const Proposal p = ProposeAll(*target_, GetParam());
  ASSERT_EQ(p.leads.size(), static_cast<size_t>(kDrafts));
  const std::vector<int32_t>& context = p.context;
  const std::vector<int32_t>& all = p.tokens;
  const std::vector<float>& leads = p.leads;
  // The first draft whose lead's bin no earlier draft shares.
  size_t j = 1;
  auto shares_bin = [&](size_t i) {
    return std::any_of(leads.begin(), leads.begin() + static_cast<ptrdiff_t>(i), [&](float l) {
      return LeadCalibration::BinOf(l) == LeadCalibration::BinOf(leads[i]);
    });
  };
  while (j < all.size() && shares_bin(j)) ++j;
  ASSERT_LT(j, all.size()) << "every lead in the bins of the first";

  DraftModelOptions options;
  options.min_acceptance = 0.5;
  std::unique_ptr<DraftModelSource> draft = MakeDraft(*target_, 11, GetParam(), options);
  EXPECT_TRUE(draft->PacesItself());
  std::vector<int32_t> kept = context;  // the target kept drafts 0..j-1, then another token
  kept.insert(kept.end(), all.begin(), all.begin() + static_cast<ptrdiff_t>(j));
  kept.push_back(all[j] == 7 ? 8 : 7);
  constexpr int kLessons = 6;
  for (uint64_t id = 1; id <= kLessons; ++id) {
    std::vector<int32_t> first, second;
    draft->Propose(id, context, kDrafts, &first);
    ASSERT_GE(first.size(), j + 1) << "lesson " << id;
    EXPECT_TRUE(std::equal(first.begin(), first.end(), all.begin())) << "lesson " << id;
    draft->Propose(id, kept, 1, &second);  // learns what was kept
    draft->Forget(id);                     // (the second proposal is never judged)
  }
  EXPECT_EQ(draft->calibration().seen(leads[j]), kLessons);
  EXPECT_LT(draft->calibration().Estimate(leads[j]), 0.5);
  for (size_t i = 0; i < j; ++i) EXPECT_GT(draft->calibration().Estimate(leads[i]), 0.5) << i;
  std::vector<int32_t> taught;
  draft->Propose(100, context, kDrafts, &taught);
  EXPECT_EQ(taught, std::vector<int32_t>(all.begin(), all.begin() + static_cast<ptrdiff_t>(j + 1)));
}

INSTANTIATE_TEST_SUITE_P(Backends, DraftModelSourceTest,
                         ::testing::Values("reference", "cpu_blas"));

TEST(DraftModelSourceCreateTest, RejectsAPoolTooSmallAndBadOptions) {
  std::unique_ptr<model::Model> target = SmallRandomModel();
  DraftModelOptions tiny;
  tiny.kv_bytes = 1;
  auto layout = model::KvLayout::ForModel(target->config(), 4, model::DType::kF16);
  auto backend = backends::CreateBackend("reference", *target, layout, backends::BackendOptions{});
  ASSERT_TRUE(backend.ok());
  auto small = SmallRandomModel();
  auto backend2 = backends::CreateBackend("reference", *small, layout, backends::BackendOptions{});
  auto s = DraftModelSource::Create(*target, std::move(small), *std::move(backend2), tiny);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
  DraftModelOptions bad;
  bad.max_chunk_tokens = 0;
  auto other = SmallRandomModel();
  auto backend3 = backends::CreateBackend("reference", *other, layout, backends::BackendOptions{});
  s = DraftModelSource::Create(*target, std::move(other), *std::move(backend3), bad);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  for (double margin :
       {-0.5, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    DraftModelOptions bad_margin;
    bad_margin.min_margin = margin;
    auto m = SmallRandomModel();
    auto b = backends::CreateBackend("reference", *m, layout, backends::BackendOptions{});
    s = DraftModelSource::Create(*target, std::move(m), *std::move(b), bad_margin);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << margin;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("draft_model.min_margin")) << margin;
  }
  for (double acceptance : {-0.1, 1.0, std::numeric_limits<double>::quiet_NaN()}) {
    DraftModelOptions bad_acceptance;
    bad_acceptance.min_acceptance = acceptance;
    auto m = SmallRandomModel();
    auto b = backends::CreateBackend("reference", *m, layout, backends::BackendOptions{});
    s = DraftModelSource::Create(*target, std::move(m), *std::move(b), bad_acceptance);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << acceptance;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("draft_model.min_acceptance"));
  }
}

// Through LoadModel, as kvserve does: stories260K drafting for itself.
TEST(DraftModelLoadingTest, LoadsTheDraftModelAndChecksTheOptions) {
  const char* dir = std::getenv("KVSERVE_MODELS_DIR");
  ASSERT_NE(dir, nullptr) << "run with ctest";
  const std::string file = std::string(dir) + "/stories260K.gguf";
  ModelOptions options;
  options.model_path = file;
  options.threads = 1;
  options.engine.kv_budget_bytes = size_t{16} << 20;
  options.engine.speculative.source = "draft_model";
  options.engine.speculative.adaptive = false;
  EXPECT_THAT(std::string(ValidateModelOptions(options).message()),
              HasSubstr("draft_model is required"));
  options.draft_model_path = file;
  ASSERT_TRUE(ValidateModelOptions(options).ok());
  absl::StatusOr<LoadedModel> loaded = LoadModel(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->engine->Stats().speculative.source, "draft_model");
  Request r = GreedyRequest({1, 403, 407, 259, 376}, 48);
  const Result got = RunRequest(*loaded->engine, r);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_GT(got.usage.draft_tokens, 0);
  EXPECT_EQ(got.usage.draft_tokens_accepted, got.usage.draft_tokens);

  options.engine.speculative.source = "ngram";
  EXPECT_THAT(std::string(ValidateModelOptions(options).message()),
              HasSubstr("draft_model needs speculative draft_model"));
  options.engine.speculative.source = "draft_model";
  options.draft_model_path = dir + std::string("/no-such-model.gguf");
  absl::StatusOr<LoadedModel> missing = LoadModel(options);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("draft model: "));
}

}  // namespace
}  // namespace kvserve::engine
