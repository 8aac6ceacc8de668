// Session record semantics of the SessionCache service (versions, leases, tombstones:
// session_cache.proto, "Sessions") end to end, through RemoteCacheClient and a real
// CacheServer on 127.0.0.1:0, on every session store: memory, disk (a temp folder) and
// Redis (a real redis-server; skipped when absent). All time is a FakeClock's, except
// that Redis expires keys on its own clock (the checks of record expiry skip Redis).
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "cache/block_record.h"
#include "cache/remote_cache_client.h"
#include "cachesvc/cache_server.h"
#include "cachesvc/disk_session_store.h"
#include "cachesvc/memory_block_store.h"
#include "cachesvc/memory_session_store.h"
#include "cachesvc/redis_client.h"
#include "cachesvc/redis_session_store.h"
#include "cachesvc/session_index.h"
#include "cachesvc/testing/redis_server.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::cachesvc {
namespace {

namespace fs = std::filesystem;
using cache::LeaseRequest;
using cache::RemoteCacheClient;
using cache::RemoteSession;
using ::testing::HasSubstr;

class SessionSemanticsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("kvserve_sem_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    if (GetParam() == "redis") {
      if (!testing::RedisServer::BinaryExists()) GTEST_SKIP() << "no redis-server";
      ASSERT_TRUE(redis_.Start().ok());
    }
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    fs::remove_all(dir_);
  }

  std::unique_ptr<SessionRecordStore> NewStore() {
    if (GetParam() == "memory") {
      return std::make_unique<MemorySessionStore>(MemorySessionStore::Options{});
    }
    if (GetParam() == "disk") {
      auto store = DiskSessionStore::Create({.dir = (dir_ / "sessions").string()}, clock_.Now());
      EXPECT_TRUE(store.ok()) << store.status();
      return *std::move(store);
    }
    RedisOptions options;
    options.port = redis_.port();
    std::shared_ptr<RedisClient> client = *RedisClient::Create(options);
    return *RedisSessionStore::Create(client, {});
  }

  void Start(SessionCacheService::Options service = {}) {
    CacheServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.service = service;
    auto server = CacheServer::Start(std::move(options),
                                     *MemoryBlockStore::Create({.capacity_bytes = 1 << 20}),
                                     NewStore(), &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = NewClient();
    stub_ = v1::SessionCache::NewStub(client_->channel());
  }
  std::unique_ptr<RemoteCacheClient> NewClient() {
    return *RemoteCacheClient::Create({.target = absl::StrCat("127.0.0.1:", server_->port())});
  }
  bool RealExpiry() const { return GetParam() != "redis"; }

  static absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }
  static RemoteSession Session(const std::string& id, std::vector<int32_t> tokens = {1, 2, 3}) {
    RemoteSession s;
    s.id = id;
    s.partition = BlockHash{1, 2};
    s.turn_ends = {static_cast<int32_t>(tokens.size())};
    s.tokens = std::move(tokens);
    s.owner = "replica-a";
    return s;
  }
  absl::StatusOr<int64_t> Put(const RemoteSession& s, int64_t expected,
                              const std::string& holder = "") {
    return client_->PutSession(s, expected, holder, Deadline());
  }
  absl::StatusOr<RemoteSession> Get(const std::string& id) {
    return client_->GetSession(id, nullptr, Deadline());
  }
  absl::StatusOr<RemoteSession> Lease(const std::string& id, const std::string& holder,
                                      absl::Duration d = absl::Seconds(30)) {
    const LeaseRequest lease{.holder = holder, .duration = d};
    return client_->GetSession(id, &lease, Deadline());
  }
  int64_t StatsSessions() { return client_->GetStats(Deadline())->sessions(); }
  std::vector<std::string> ListedIds() {
    v1::ListSessionsRequest request;
    v1::ListSessionsResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(stub_->ListSessions(&context, request, &response).ok());
    std::vector<std::string> ids;
    for (const v1::SessionRecord& r : response.sessions()) ids.push_back(r.session_id());
    return ids;
  }

  fs::path dir_;
  testing::RedisServer redis_;
  common::testing::FakeClock clock_;
  std::unique_ptr<CacheServer> server_;
  std::unique_ptr<RemoteCacheClient> client_;
  std::unique_ptr<v1::SessionCache::Stub> stub_;
};

TEST_P(SessionSemanticsTest, PutSessionIsACompareAndSetOnTheVersion) {
  Start();
  EXPECT_EQ(*Put(Session("s"), 0), 1);
  // Created already: another creation is a conflict, and so is any stale version.
  absl::StatusOr<int64_t> put = Put(Session("s", {9}), 0);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(put.status().message(), HasSubstr("version 1"));
  EXPECT_EQ(Put(Session("s", {9}), 2).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(*Put(Session("s", {1, 2, 3, 4, 5}), 1), 2);
  EXPECT_EQ(Put(Session("s", {9}), 1).status().code(), absl::StatusCode::kAborted);
  absl::StatusOr<RemoteSession> got = Get("s");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version, 2);
  EXPECT_EQ(got->tokens, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_FALSE(got->closed);
  // A negative expected_version is the caller's mistake.
  v1::PutSessionRequest request;
  request.mutable_record()->set_session_id("s");
  request.mutable_record()->set_partition(cache::HashToBytes(BlockHash{1, 2}));
  request.set_expected_version(-1);
  v1::PutSessionResponse response;
  grpc::ClientContext context;
  EXPECT_EQ(stub_->PutSession(&context, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_P(SessionSemanticsTest, RacingPutsOfOneVersionHaveExactlyOneWinner) {
  Start();
  ASSERT_TRUE(Put(Session("s"), 0).ok());
  constexpr int kWriters = 8;
  std::vector<std::unique_ptr<RemoteCacheClient>> clients;
  for (int i = 0; i < kWriters; ++i) clients.push_back(NewClient());
  std::vector<absl::StatusCode> codes(kWriters);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      RemoteSession s = Session("s", {1, 2, 3, i});
      ready.fetch_add(1);
      while (ready.load() < kWriters) std::this_thread::yield();
      codes[i] = clients[i]->PutSession(s, 1, "", Deadline()).status().code();
    });
  }
  for (std::thread& t : threads) t.join();
  int wins = 0;
  int winner = -1;
  for (int i = 0; i < kWriters; ++i) {
    if (codes[i] == absl::StatusCode::kOk) {
      ++wins;
      winner = i;
    } else {
      EXPECT_EQ(codes[i], absl::StatusCode::kAborted);
    }
  }
  ASSERT_EQ(wins, 1);
  absl::StatusOr<RemoteSession> got = Get("s");
  EXPECT_EQ(got->version, 2);
  EXPECT_EQ(got->tokens, (std::vector<int32_t>{1, 2, 3, winner}));
}

TEST_P(SessionSemanticsTest, ALeaseExcludesOtherHoldersUntilCommitReleaseOrExpiry) {
  Start();
  ASSERT_TRUE(Put(Session("s"), 0).ok());
  absl::StatusOr<RemoteSession> a = Lease("s", "turn-a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->lease_holder, "turn-a");
  EXPECT_EQ(a->lease_remaining, absl::Seconds(30));
  EXPECT_EQ(a->version, 1);  // a lease is no write
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{1, 2, 3}));
  // Another turn: refused while the lease is live; a plain read still answers.
  absl::StatusOr<RemoteSession> b = Lease("s", "turn-b");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(b.status().message(), HasSubstr("turn-a"));
  EXPECT_EQ(Get("s")->lease_holder, "turn-a");
  EXPECT_EQ(Put(Session("s", {7}), 1).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Put(Session("s", {7}), 1, "turn-b").status().code(), absl::StatusCode::kAborted);
  // The holder renews it.
  clock_.Advance(absl::Seconds(20));
  EXPECT_EQ(Lease("s", "turn-a")->lease_remaining, absl::Seconds(30));
  clock_.Advance(absl::Seconds(20));
  EXPECT_EQ(Lease("s", "turn-b").status().code(), absl::StatusCode::kAborted);
  // Its commit releases it.
  EXPECT_EQ(*Put(Session("s", {1, 2, 3, 4}), 1, "turn-a"), 2);
  EXPECT_TRUE(Get("s")->lease_holder.empty());
  b = Lease("s", "turn-b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->version, 2);
  // ReleaseLease by someone else changes nothing; by the holder frees it.
  EXPECT_TRUE(client_->ReleaseLease("s", "turn-a", Deadline()).ok());
  EXPECT_EQ(Lease("s", "turn-c").status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(client_->ReleaseLease("s", "turn-b", Deadline()).ok());
  ASSERT_TRUE(Lease("s", "turn-c").ok());
  // A holder that dies: its lease expires and anyone takes the session.
  clock_.Advance(absl::Seconds(30));
  EXPECT_TRUE(Get("s")->lease_holder.empty());
  ASSERT_TRUE(Lease("s", "turn-d").ok());
  // The expired holder's late commit: the version check still applies, the live lease
  // of turn-d refuses it.
  EXPECT_EQ(Put(Session("s", {5}), 2, "turn-c").status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(client_->ReleaseLease("unknown", "turn-d", Deadline()).ok());
  EXPECT_EQ(Lease("unknown", "turn-d").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(SessionSemanticsTest, LeasesAreBoundedByMaxSessionLeaseAndMustBePositive) {
  SessionCacheService::Options options;
  options.max_session_lease = absl::Minutes(1);
  Start(options);
  ASSERT_TRUE(Put(Session("s"), 0).ok());
  EXPECT_EQ(Lease("s", "t", absl::Hours(1))->lease_remaining, absl::Minutes(1));
  for (int64_t ms : {0, -5}) {
    v1::GetSessionRecordRequest request;
    request.set_session_id("s");
    request.set_lease_holder("t");
    request.set_lease_ms(ms);
    v1::SessionRecord response;
    grpc::ClientContext context;
    EXPECT_EQ(stub_->GetSession(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A record whose TTL ends under a live lease lives until the lease ends.
  RemoteSession brief = Session("brief");
  brief.ttl = absl::Seconds(10);
  ASSERT_TRUE(Put(brief, 0).ok());
  ASSERT_TRUE(Lease("brief", "t", absl::Seconds(40)).ok());
  clock_.Advance(absl::Seconds(20));
  EXPECT_TRUE(Get("brief").ok());
}

TEST_P(SessionSemanticsTest, DeleteLeavesATombstoneThatRefusesPutsAndLeases) {
  Start();
  ASSERT_TRUE(Put(Session("s"), 0).ok());
  ASSERT_TRUE(Lease("s", "turn-a").ok());
  // Closing wins over a running turn: its commit then finds the session closed.
  ASSERT_TRUE(client_->DeleteSession("s", Deadline()).ok());
  absl::StatusOr<RemoteSession> got = Get("s");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->closed);
  EXPECT_EQ(got->version, 2);
  EXPECT_TRUE(got->tokens.empty());
  EXPECT_TRUE(got->lease_holder.empty());
  for (int64_t expected : {0, 1, 2}) {
    absl::StatusOr<int64_t> put = Put(Session("s"), expected, "turn-a");
    EXPECT_EQ(put.status().code(), absl::StatusCode::kFailedPrecondition) << expected;
  }
  // A lease on a tombstone answers it, takes nothing.
  got = Lease("s", "turn-b");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->closed);
  EXPECT_TRUE(got->lease_holder.empty());
  // Closing again is OK and changes nothing; closing an id never seen leaves a tombstone.
  EXPECT_TRUE(client_->DeleteSession("s", Deadline()).ok());
  EXPECT_EQ(Get("s")->version, 2);
  EXPECT_TRUE(client_->DeleteSession("never-seen", Deadline()).ok());
  EXPECT_TRUE(Get("never-seen")->closed);
  EXPECT_EQ(Get("never-seen")->version, 1);
  EXPECT_EQ(Put(Session("never-seen"), 0).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(SessionSemanticsTest, ATombstoneOutlivesTheRecordTtlThenExpires) {
  SessionCacheService::Options options;
  options.session_tombstone_ttl = absl::Hours(24);
  Start(options);
  RemoteSession s = Session("s");
  s.ttl = absl::Seconds(10);
  ASSERT_TRUE(Put(s, 0).ok());
  ASSERT_TRUE(client_->DeleteSession("s", Deadline()).ok());
  clock_.Advance(absl::Hours(2));  // far past the record's own TTL
  absl::StatusOr<RemoteSession> got = Get("s");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->closed);
  // 22 h left (Redis: still about 24 h, as it counts on its own clock).
  EXPECT_GE(got->ttl, absl::Hours(22));
  EXPECT_LE(got->ttl, RealExpiry() ? absl::Hours(22) : absl::Hours(24));
  EXPECT_EQ(Put(s, 2).status().code(), absl::StatusCode::kFailedPrecondition);
  if (!RealExpiry()) return;  // Redis expires on its own clock
  clock_.Advance(absl::Hours(22));
  EXPECT_EQ(Get("s").status().code(), absl::StatusCode::kNotFound);
  // Then the id is free again (why the tombstone TTL must cover every replica's copy).
  EXPECT_EQ(*Put(s, 0), 1);
}

TEST_P(SessionSemanticsTest, ListAndStatsLeaveTombstonesOut) {
  Start();
  ASSERT_TRUE(Put(Session("a"), 0).ok());
  ASSERT_TRUE(Put(Session("b"), 0).ok());
  ASSERT_TRUE(client_->DeleteSession("a", Deadline()).ok());
  ASSERT_TRUE(client_->DeleteSession("c", Deadline()).ok());
  EXPECT_EQ(ListedIds(), (std::vector<std::string>{"b"}));
  EXPECT_EQ(StatsSessions(), 1);
}

INSTANTIATE_TEST_SUITE_P(Stores, SessionSemanticsTest, ::testing::Values("memory", "disk", "redis"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// A block store that records the session hints it is given.
class HintRecorder final : public BlockStore {
 public:
  absl::StatusOr<LookupResult> Lookup(const BlockHash&, std::span<const BlockHash>,
                                      absl::Time) override {
    return LookupResult{};
  }
  absl::StatusOr<RecordPtr> Get(const BlockKey&, absl::Time) override { return RecordPtr(); }
  absl::StatusOr<PutOutcome> Put(const BlockKey&, const BlockHash&, RecordPtr,
                                 absl::Time) override {
    return PutOutcome::kStored;
  }
  void Erase(const BlockKey&) override {}
  void SetSession(const std::string& id, const BlockHash&, const BlockHash& head,
                  absl::Time) override {
    hints[id] = head;
  }
  void RemoveSession(const std::string& id) override { hints.erase(id); }
  bool takes_session_hints() const override { return true; }
  BlockStoreStats stats() const override { return {}; }
  std::string name() const override { return "recorder"; }

  std::map<std::string, BlockHash> hints;
};

SessionMutation Write(const std::string& id, bool has_head, bool closed, absl::Time now) {
  return [=](std::optional<StoredSession>& r) -> absl::StatusOr<bool> {
    StoredSession s;
    s.id = id;
    s.has_head = has_head;
    s.head = BlockHash{3, 3};
    s.closed = closed;
    s.expires_at = now + absl::Hours(1);
    r = std::move(s);
    return true;
  };
}

TEST(SessionIndexTest, HintsFollowEveryRecordChangeAndAreRestoredAtStart) {
  const absl::Time now = absl::FromUnixSeconds(1'000'000);
  MemorySessionStore records({});
  HintRecorder blocks;
  {
    auto index = *SessionIndex::Create(&records, &blocks, now);
    ASSERT_TRUE(index->Update("a", Write("a", true, false, now), now).ok());
    ASSERT_TRUE(index->Update("b", Write("b", true, false, now), now).ok());
    EXPECT_EQ(blocks.hints.size(), 2u);
    ASSERT_TRUE(index->Update("b", Write("b", false, false, now), now).ok());  // no head now
    EXPECT_FALSE(blocks.hints.contains("b"));
    ASSERT_TRUE(index->Update("c", Write("c", true, false, now), now).ok());
    ASSERT_TRUE(index->Update("c", Write("c", false, true, now), now).ok());  // a tombstone
    EXPECT_FALSE(blocks.hints.contains("c"));
    // A failed update changes no hint.
    EXPECT_FALSE(index
                     ->Update(
                         "a",
                         [](std::optional<StoredSession>&) -> absl::StatusOr<bool> {
                           return absl::AbortedError("no");
                         },
                         now)
                     .ok());
    EXPECT_TRUE(blocks.hints.contains("a"));
  }
  // A new index over the same records (a restart) restores the live records' hints.
  HintRecorder fresh;
  auto index = *SessionIndex::Create(&records, &fresh, now);
  EXPECT_EQ(index->restored_hints(), 1);
  ASSERT_EQ(fresh.hints.size(), 1u);
  EXPECT_EQ(fresh.hints.begin()->first, "a");
}

// A SessionCache that answers whatever the test sets: the client must not trust it.
// Guarded by a mutex: the test thread scripts it while gRPC threads answer (the RPC
// orders them, but through gRPC code ThreadSanitizer does not see).
class ScriptedService final : public v1::SessionCache::Service {
 public:
  struct Script {
    v1::SessionRecord record;
    int64_t put_version = 0;
    grpc::Status status = grpc::Status::OK;
  };
  void Set(Script script) {
    std::lock_guard<std::mutex> lock(mu_);
    script_ = std::move(script);
  }

  grpc::Status GetSession(grpc::ServerContext*, const v1::GetSessionRecordRequest*,
                          v1::SessionRecord* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    *response = script_.record;
    return script_.status;
  }
  grpc::Status PutSession(grpc::ServerContext*, const v1::PutSessionRequest*,
                          v1::PutSessionResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    response->set_version(script_.put_version);
    return script_.status;
  }

 private:
  std::mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_);
};

TEST(RemoteCacheClientSessionTest, AnswersThatAreNotTheRecordAskedForAreDataLoss) {
  ScriptedService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto client = *RemoteCacheClient::Create({.target = absl::StrCat("127.0.0.1:", port)});
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  const LeaseRequest lease{.holder = "turn-1"};

  v1::SessionRecord good;
  good.set_session_id("s");
  good.set_partition(cache::HashToBytes(BlockHash{1, 2}));
  good.add_tokens(5);
  good.add_tokens(6);
  good.add_turn_ends(2);
  good.set_version(3);
  good.set_lease_holder("turn-1");
  good.set_lease_expires_in_ms(1000);
  ScriptedService::Script script;
  script.record = good;
  service.Set(script);
  absl::StatusOr<RemoteSession> got = client->GetSession("s", &lease, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->version, 3);
  EXPECT_EQ(got->lease_holder, "turn-1");
  EXPECT_EQ(got->lease_remaining, absl::Seconds(1));

  const std::vector<std::function<void(v1::SessionRecord&)>> lies = {
      [](v1::SessionRecord& r) { r.set_session_id("other"); },
      [](v1::SessionRecord& r) { r.set_version(0); },
      [](v1::SessionRecord& r) { r.set_version(-4); },
      [](v1::SessionRecord& r) { r.set_closed(true); },  // a tombstone with tokens
      [](v1::SessionRecord& r) { r.set_lease_holder("turn-2"); },
      [](v1::SessionRecord& r) { r.set_lease_expires_in_ms(0); },
      [](v1::SessionRecord& r) { r.set_lease_expires_in_ms(-1); },
      [](v1::SessionRecord& r) { r.set_turn_ends(0, 3); },
      [](v1::SessionRecord& r) { r.set_tokens(0, -1); },
      [](v1::SessionRecord& r) { r.set_partition("short"); },
  };
  for (size_t i = 0; i < lies.size(); ++i) {
    script.record = good;
    lies[i](script.record);
    service.Set(script);
    EXPECT_EQ(client->GetSession("s", &lease, deadline).status().code(),
              absl::StatusCode::kDataLoss)
        << i;
  }
  // A lease asked for and not granted, with no error saying so.
  script.record = good;
  script.record.clear_lease_holder();
  script.record.clear_lease_expires_in_ms();
  service.Set(script);
  EXPECT_EQ(client->GetSession("s", &lease, deadline).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(client->GetSession("s", nullptr, deadline).ok());  // none asked for: fine

  // PutSession: the new version must be expected_version + 1.
  RemoteSession s;
  s.id = "s";
  script.put_version = 3;
  service.Set(script);
  EXPECT_EQ(*client->PutSession(s, 2, "", deadline), 3);
  EXPECT_EQ(client->PutSession(s, 5, "", deadline).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(client->PutSession(s, -1, "", deadline).status().code(),
            absl::StatusCode::kInvalidArgument);

  // The service's conflict statuses come through unchanged.
  for (grpc::StatusCode code : {grpc::StatusCode::ABORTED, grpc::StatusCode::FAILED_PRECONDITION,
                                grpc::StatusCode::NOT_FOUND}) {
    script.status = grpc::Status(code, "scripted");
    service.Set(script);
    EXPECT_EQ(static_cast<int>(client->PutSession(s, 2, "", deadline).status().code()),
              static_cast<int>(code));
    EXPECT_EQ(static_cast<int>(client->GetSession("s", &lease, deadline).status().code()),
              static_cast<int>(code));
  }
  server->Shutdown();
}

}  // namespace
}  // namespace kvserve::cachesvc
