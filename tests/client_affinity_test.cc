// Session-affine routing against three in-process kvserve replicas running the real
// engine and model, sharing one in-process session cache (engine/testing/
// fake_remote_cache.h, as kvserve --session-cache shares kvserve-cache): the turns of a
// session go to the replica that owns its id on the ring and reuse the KV there; when
// that replica stops, the next turn moves to the next replica on the ring, fetches the
// history from the cache and succeeds, and later turns stay there.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "engine/model_loading.h"
#include "engine/testing/fake_remote_cache.h"
#include "gtest/gtest.h"
#include "service/server.h"

namespace kvserve::client {
namespace {

constexpr char kFirstTurn[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "sun with her big red ball.";

class ClientAffinityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> targets;
    for (int i = 0; i < 3; ++i) {
      service::ServerOptions options;
      options.listen_address = "127.0.0.1:0";
      options.metrics.address = "";
      auto server = service::Server::Start(options);
      ASSERT_TRUE(server.ok()) << server.status();
      engine::ModelOptions model;
      const char* dir = std::getenv("KVSERVE_MODELS_DIR");
      model.model_path = std::string(dir == nullptr ? "models" : dir) + "/stories260K.gguf";
      model.threads = 1;
      model.engine.kv_budget_bytes = size_t{8} << 20;
      model.engine.remote_cache = &cache_;
      model.engine.remote.owner = absl::StrCat("replica-", i);
      auto loaded = engine::LoadModel(model);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      ASSERT_TRUE((*server)
                      ->Attach(std::move(loaded->model), std::move(loaded->engine), loaded->backend)
                      .ok());
      targets.push_back(absl::StrCat("127.0.0.1:", (*server)->port()));
      servers_.push_back(*std::move(server));
    }
    Client::Options options;
    options.timeout = absl::Seconds(30);
    auto client = Client::Connect(targets, options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  int IndexOf(const std::string& target) const {
    for (int i = 0; i < static_cast<int>(servers_.size()); ++i) {
      if (servers_[i] != nullptr && absl::StrCat("127.0.0.1:", servers_[i]->port()) == target) {
        return i;
      }
    }
    return -1;
  }

  // One greedy turn of `session_id`; its usage and the replica that served it.
  v1::Usage Turn(const std::string& session_id, const std::string& text, CallInfo* info) {
    v1::GenerateRequest request;
    request.set_text(text);
    request.set_session_id(session_id);
    request.set_max_tokens(8);
    request.mutable_sampling()->set_temperature(0);
    absl::StatusOr<v1::GenerateResponse> response = client_->Generate(request, info);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->usage() : v1::Usage();
  }

  // Waits until the cache's record of `session_id` holds `history_tokens` tokens (the
  // record of a turn is written behind its blocks).
  bool WaitForRecord(const std::string& session_id, int history_tokens) {
    const absl::Time end = absl::Now() + absl::Seconds(20);
    while (absl::Now() < end) {
      absl::StatusOr<cache::RemoteSession> record =
          cache_.GetSession(session_id, nullptr, absl::InfiniteFuture());
      if (record.ok() && static_cast<int>(record->tokens.size()) == history_tokens) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  engine::testing::FakeRemoteCache cache_;  // outlives the engines
  std::vector<std::unique_ptr<service::Server>> servers_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientAffinityTest, TurnsStayOnTheOwnerAndMoveWhenItStops) {
  absl::StatusOr<v1::Session> session = client_->OpenSession();
  ASSERT_TRUE(session.ok()) << session.status();
  const std::string id = session->session_id();
  const std::string owner = client_->ReplicaFor(id);
  ASSERT_GE(IndexOf(owner), 0);

  // Three turns on the owner; turns 2 and 3 reuse its local KV.
  CallInfo info;
  Turn(id, kFirstTurn, &info);
  EXPECT_EQ(info.replica, owner);
  for (const char* text : {" Then she saw a big dog.", " The dog wanted to play."}) {
    const v1::Usage usage = Turn(id, text, &info);
    EXPECT_EQ(info.replica, owner);
    EXPECT_EQ(info.attempts, 1);
    EXPECT_GT(usage.cached_tokens_local(), 0);
    EXPECT_EQ(usage.cached_tokens_remote(), 0);
  }
  absl::StatusOr<v1::Session> state = client_->GetSession(id);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(WaitForRecord(id, state->history_tokens()));

  // The owner stops: the next turn moves to another replica, continues the history from
  // the cache, and later turns stay there.
  servers_[IndexOf(owner)].reset();
  const v1::Usage moved = Turn(id, " They ran to the park.", &info);
  const std::string second = info.replica;
  EXPECT_NE(second, owner);
  EXPECT_EQ(info.attempts, 2);  // the stopped owner, then the next replica on the ring
  EXPECT_GT(moved.prompt_tokens(), state->history_tokens());
  EXPECT_GT(moved.cached_tokens_remote(), 0);
  EXPECT_EQ(client_->ReplicaFor(id), second);
  const v1::Usage after = Turn(id, " It was a good day.", &info);
  EXPECT_EQ(info.replica, second);
  EXPECT_EQ(info.attempts, 1);
  EXPECT_GT(after.cached_tokens_local(), 0);
  EXPECT_TRUE(client_->CloseSession(id).ok());
}

// Sessions spread over the replicas (the ring balances them), each turn on its owner.
// Session ids are random, so each replica owns a session with probability about 1/3: with
// 12 sessions some replica owned none in about 2 % of runs (3 * (2/3)^12; a likely, not
// verified, cause of a failure seen once under ctest); with 60, about 1e-10.
TEST_F(ClientAffinityTest, SessionsSpreadOverReplicas) {
  std::vector<int> owners(3, 0);
  for (int i = 0; i < 60; ++i) {
    absl::StatusOr<v1::Session> session = client_->OpenSession();
    ASSERT_TRUE(session.ok()) << session.status();
    CallInfo info;
    Turn(session->session_id(), "Once upon a time", &info);
    EXPECT_EQ(info.replica, client_->ReplicaFor(session->session_id()));
    ++owners[IndexOf(info.replica)];
  }
  for (int n : owners) EXPECT_GT(n, 0);
}

}  // namespace
}  // namespace kvserve::client
