// The SessionCache service end to end: a real CacheServer on 127.0.0.1:0 in this
// process, called through RemoteCacheClient and, for malformed requests, a raw stub.
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cache/remote_cache_client.h"
#include "cachesvc/cache_server.h"
#include "cachesvc/memory_block_store.h"
#include "cachesvc/memory_session_store.h"
#include "cachesvc/testing/block_chain.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"

namespace kvserve::cachesvc {
namespace {

using cache::RemoteCacheClient;
using testing::BlockChain;
using ::testing::HasSubstr;
using testing::MakeChain;

constexpr char kToken[] = "s3cret-token";

struct ServerSetup {
  int64_t memory_bytes = int64_t{64} << 20;
  bool auth = false;
  SessionCacheService::Options service;
};

class SessionCacheServiceTest : public ::testing::Test {
 protected:
  void Start(ServerSetup setup = {}) {
    CacheServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.service = setup.service;
    if (setup.auth) options.auth = *server::BearerAuth::Parse(std::string(kToken) + " tester\n");
    auto blocks = MemoryBlockStore::Create({.capacity_bytes = setup.memory_bytes});
    ASSERT_TRUE(blocks.ok());
    auto server = CacheServer::Start(
        std::move(options), *std::move(blocks),
        std::make_unique<MemorySessionStore>(MemorySessionStore::Options{}), &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = NewClient(setup.auth ? kToken : "");
    stub_ = v1::SessionCache::NewStub(client_->channel());
  }

  std::unique_ptr<RemoteCacheClient> NewClient(const std::string& token,
                                               int32_t fetch_chunk_bytes = 4 << 20) {
    auto client = RemoteCacheClient::Create({.target = absl::StrCat("127.0.0.1:", server_->port()),
                                             .token = token,
                                             .fetch_chunk_bytes = fetch_chunk_bytes});
    EXPECT_TRUE(client.ok());
    return *std::move(client);
  }

  static absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }

  int32_t Store(const BlockHash& partition, const std::vector<std::string>& records) {
    absl::StatusOr<int32_t> n = client_->Store(partition, records, Deadline());
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : -1;
  }
  int32_t Lookup(const BlockHash& partition, const std::vector<BlockHash>& chain) {
    absl::StatusOr<cache::RemoteKvCache::Presence> p =
        client_->Lookup(partition, chain, Deadline());
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? p->blocks : -1;
  }
  std::vector<std::string> Fetch(const BlockHash& partition, const std::vector<BlockHash>& chain,
                                 RemoteCacheClient* client = nullptr) {
    // on_record may run on several threads at once (one per range), each index once.
    std::mutex mu;
    std::map<int32_t, std::string> by_index;
    absl::StatusOr<int32_t> n =
        (client ? client : client_.get())
            ->Fetch(partition, chain, Deadline(), [&](int32_t index, std::string_view record) {
              std::lock_guard<std::mutex> lock(mu);
              EXPECT_TRUE(by_index.emplace(index, std::string(record)).second) << index;
              return true;
            });
    EXPECT_TRUE(n.ok()) << n.status();
    // The records of the prefix Fetch counts; a later range's beyond it do not count.
    std::vector<std::string> got;
    for (int32_t i = 0; n.ok() && i < *n; ++i) {
      auto it = by_index.find(i);
      EXPECT_NE(it, by_index.end()) << "record " << i << " counted but never delivered";
      if (it != by_index.end()) got.push_back(it->second);
    }
    return got;
  }
  std::string MetricsText() { return server_->metrics().SerializeText(); }

  // A raw StoreBlocks call with the given messages.
  grpc::Status RawStore(const std::vector<v1::StoreBlocksRequest>& messages,
                        v1::StoreBlocksResponse* response) {
    grpc::ClientContext context;
    auto writer = stub_->StoreBlocks(&context, response);
    for (const v1::StoreBlocksRequest& m : messages) {
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  common::testing::FakeClock clock_;
  std::unique_ptr<CacheServer> server_;
  std::unique_ptr<RemoteCacheClient> client_;
  std::unique_ptr<v1::SessionCache::Stub> stub_;
};

v1::StoreBlocksRequest Chunk(const BlockHash* partition, int32_t index, int64_t offset,
                             int64_t record_bytes, std::string data) {
  v1::StoreBlocksRequest m;
  if (partition) m.set_partition(cache::HashToBytes(*partition));
  v1::BlockChunk* c = m.add_chunks();
  c->set_index(index);
  c->set_offset(offset);
  c->set_record_bytes(record_bytes);
  c->set_data(std::move(data));
  return m;
}

TEST_F(SessionCacheServiceTest, StoreLookupFetchRoundTrip) {
  Start();
  const BlockChain c = MakeChain(5, "");
  EXPECT_EQ(Store(c.partition, c.records), 5);
  EXPECT_EQ(Lookup(c.partition, c.hashes), 5);
  EXPECT_EQ(Fetch(c.partition, c.hashes), c.records);
  EXPECT_EQ(Store(c.partition, c.records), 5);  // already present counts as stored
  absl::StatusOr<v1::CacheStats> stats = client_->GetStats(Deadline());
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->blocks(), 5);
  EXPECT_EQ(stats->backend(), "memory");
  EXPECT_EQ(stats->hit_blocks_total(), 5);
  EXPECT_EQ(stats->bytes_served_total(), stats->bytes());
}

TEST_F(SessionCacheServiceTest, LargeRecordsTravelInSeveralChunks) {
  Start();
  // ~1.2 MB records: more than one 1 MiB store chunk; fetched in 64 KiB chunks.
  const model::KvLayout layout{12, 768, 16, model::DType::kF32};
  const BlockChain c = MakeChain(3, "big", 1, layout);
  ASSERT_GT(c.records[0].size(), size_t{1} << 20);
  EXPECT_EQ(Store(c.partition, c.records), 3);
  std::unique_ptr<RemoteCacheClient> small_chunks = NewClient("", 64 << 10);
  EXPECT_EQ(Fetch(c.partition, c.hashes, small_chunks.get()), c.records);
  EXPECT_EQ(Fetch(c.partition, c.hashes), c.records);
}

// Records that fit in a message arrive whole, one chunk each (the client reads them in
// place); a message is sent early rather than split one. ~1.2 MB records with 4 MiB
// messages: 3 records a message (3.5 MB), never 3 and a piece of the fourth.
TEST_F(SessionCacheServiceTest, RecordsThatFitAMessageAreNeverSplit) {
  Start();
  const model::KvLayout layout{12, 768, 16, model::DType::kF32};
  const BlockChain c = MakeChain(7, "whole", 1, layout);
  ASSERT_EQ(Store(c.partition, c.records), 7);
  v1::FetchBlocksRequest request;
  request.set_partition(cache::HashToBytes(c.partition));
  for (const BlockHash& h : c.hashes) request.add_block_hashes(cache::HashToBytes(h));
  request.set_max_chunk_bytes(4 << 20);
  grpc::ClientContext context;
  auto reader = stub_->FetchBlocks(&context, request);
  v1::FetchBlocksResponse message;
  std::vector<int> per_message;
  int32_t next = 0;
  while (reader->Read(&message)) {
    int64_t bytes = 0;
    for (const v1::BlockChunk& chunk : message.chunks()) {
      EXPECT_EQ(chunk.index(), next++);
      EXPECT_EQ(chunk.offset(), 0);
      EXPECT_EQ(chunk.data(), c.records[static_cast<size_t>(chunk.index())]);
      bytes += static_cast<int64_t>(chunk.data().size());
    }
    EXPECT_LE(bytes, int64_t{4} << 20);
    per_message.push_back(message.chunks_size());
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(next, 7);
  EXPECT_EQ(per_message, (std::vector<int>{3, 3, 1}));
}

TEST_F(SessionCacheServiceTest, LookupAndFetchReturnTheUnbrokenPrefixOnly) {
  Start();
  const BlockChain c = MakeChain(4, "");
  // Block 3 without block 2 is an orphan no lookup could reach: dropped, not stored.
  EXPECT_EQ(Store(c.partition, {c.records[0], c.records[1], c.records[3]}), 2);
  EXPECT_EQ(Lookup(c.partition, c.hashes), 2);
  EXPECT_EQ(Fetch(c.partition, c.hashes), (std::vector<std::string>{c.records[0], c.records[1]}));
  EXPECT_EQ(Lookup(c.partition, {c.hashes[2], c.hashes[3]}), 0);
}

TEST_F(SessionCacheServiceTest, ParallelStreamsCountThePrefixAndEndAtTheFirstGap) {
  Start();
  auto parallel = RemoteCacheClient::Create({.target = absl::StrCat("127.0.0.1:", server_->port()),
                                             .channels = 2,
                                             .fetch_streams = 4,
                                             .fetch_min_stream_blocks = 2});
  ASSERT_TRUE(parallel.ok());
  const BlockChain c = MakeChain(23, "");  // 4 ranges of 5-6 blocks
  // Without block 14 the rest are orphans: blocks 0-13 are stored, the gap is in range 2.
  std::vector<std::string> stored(c.records.begin(), c.records.begin() + 14);
  std::vector<std::string> sent = stored;
  sent.insert(sent.end(), c.records.begin() + 15, c.records.end());
  EXPECT_EQ(Store(c.partition, sent), 14);
  EXPECT_EQ(Fetch(c.partition, c.hashes, parallel->get()), stored);
  EXPECT_EQ(Store(c.partition, c.records), 23);
  EXPECT_EQ(Fetch(c.partition, c.hashes, parallel->get()), c.records);
  // on_record's false stops the fetch there (record 7, in range 1 of blocks 5-10): the
  // count ends before it; the ranges before it still complete, the later ones are
  // cancelled (what they delivered meanwhile does not count).
  std::mutex mu;
  std::set<int32_t> seen;
  absl::StatusOr<int32_t> n = (*parallel)->Fetch(
      c.partition, c.hashes, Deadline(), [&](int32_t index, std::string_view record) {
        EXPECT_EQ(record, c.records[static_cast<size_t>(index)]);
        std::lock_guard<std::mutex> lock(mu);
        EXPECT_TRUE(seen.insert(index).second) << index;
        return index != 7;
      });
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 7);
  for (int32_t i = 0; i <= 7; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  EXPECT_EQ(seen.count(8), 0u);  // range 1 stopped at its refused record
}

// Each range hands its records over as they arrive: record 0 (range 0) is held back
// until a record of a later range has reached on_record, which happens only when the
// ranges deliver side by side (before, later ranges waited in memory for range 0).
TEST_F(SessionCacheServiceTest, LaterRangesDeliverWithoutWaitingForEarlierOnes) {
  Start();
  auto parallel = RemoteCacheClient::Create({.target = absl::StrCat("127.0.0.1:", server_->port()),
                                             .channels = 2,
                                             .fetch_streams = 2,
                                             .fetch_min_stream_blocks = 2});
  ASSERT_TRUE(parallel.ok());
  const BlockChain c = MakeChain(4, "");  // ranges [0, 2) and [2, 4)
  ASSERT_EQ(Store(c.partition, c.records), 4);
  std::mutex mu;
  std::condition_variable cv;
  bool later_seen = false;
  bool waited = false;
  absl::StatusOr<int32_t> n = (*parallel)->Fetch(
      c.partition, c.hashes, Deadline(), [&](int32_t index, std::string_view record) {
        EXPECT_EQ(record, c.records[static_cast<size_t>(index)]);
        std::unique_lock<std::mutex> lock(mu);
        if (index >= 2) {
          later_seen = true;
          cv.notify_all();
        } else if (index == 0) {
          waited = cv.wait_for(lock, std::chrono::seconds(20), [&] { return later_seen; });
        }
        return true;
      });
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 4);
  EXPECT_TRUE(waited) << "range 1 delivered nothing while range 0's first record was held";
}

TEST_F(SessionCacheServiceTest, DifferentPartitionsNeverShareABlock) {
  Start();
  const BlockChain a = MakeChain(2, "tenant-a");
  const BlockChain b = MakeChain(2, "tenant-b");
  EXPECT_EQ(Store(a.partition, a.records), 2);
  EXPECT_EQ(Lookup(b.partition, a.hashes), 0);
  EXPECT_TRUE(Fetch(b.partition, a.hashes).empty());
}

TEST_F(SessionCacheServiceTest, BadRecordsAreRejectedAndCounted) {
  Start();
  const BlockChain c = MakeChain(2, "");
  const BlockChain other = MakeChain(1, "other-salt");
  std::string corrupted = c.records[0];
  corrupted[corrupted.size() - 1] ^= 1;  // payload byte
  // Forged tokens: a well-formed, checksummed record claiming block 0's hash.
  std::string forged;
  {
    const model::KvLayout& l = testing::kSmallLayout;
    std::vector<int32_t> forged_tokens(static_cast<size_t>(l.block_tokens), 7);
    std::vector<uint8_t> payload(l.block_bytes());
    cache::EncodeBlockRecord(c.partition, c.partition, c.hashes[0], forged_tokens, l, 2, payload,
                             &forged);
  }
  v1::StoreBlocksResponse response;
  std::vector<v1::StoreBlocksRequest> messages;
  const std::vector<std::string> records = {corrupted, other.records[0], forged, c.records[0]};
  for (int32_t i = 0; i < static_cast<int32_t>(records.size()); ++i) {
    messages.push_back(Chunk(i == 0 ? &c.partition : nullptr, i, 0,
                             static_cast<int64_t>(records[i].size()), records[i]));
  }
  // A truncated last record: its first half, then the stream ends.
  messages.push_back(
      Chunk(nullptr, 4, 0, static_cast<int64_t>(c.records[1].size()), c.records[1].substr(0, 100)));
  ASSERT_TRUE(RawStore(messages, &response).ok());
  EXPECT_EQ(response.stored_blocks(), 1);
  EXPECT_EQ(response.rejected_blocks(), 4);
  EXPECT_EQ(Lookup(c.partition, c.hashes), 1);  // block 1 never became visible
  EXPECT_EQ(Fetch(c.partition, c.hashes), (std::vector<std::string>{c.records[0]}));
  const std::string text = MetricsText();
  for (const char* reason : {"bad_checksum", "wrong_identity", "bad_hash", "truncated"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("kvserve_cache_rejected_blocks_total{reason=\"",
                                             reason, "\"} 1")));
  }
  EXPECT_EQ(client_->GetStats(Deadline())->rejected_blocks_total(), 4);
}

TEST_F(SessionCacheServiceTest, CancelledStreamStoresNothingOfTheOpenRecord) {
  Start();
  const BlockChain c = MakeChain(1, "");
  {
    grpc::ClientContext context;
    v1::StoreBlocksResponse response;
    auto writer = stub_->StoreBlocks(&context, &response);
    ASSERT_TRUE(writer->Write(Chunk(&c.partition, 0, 0, static_cast<int64_t>(c.records[0].size()),
                                    c.records[0].substr(0, 10))));
    context.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_EQ(Lookup(c.partition, c.hashes), 0);
}

TEST_F(SessionCacheServiceTest, MalformedRequestsGetPreciseStatuses) {
  ServerSetup setup;
  setup.service.max_chain_blocks = 8;
  setup.service.max_record_bytes = 1 << 20;
  Start(setup);
  const BlockChain c = MakeChain(2, "");
  auto lookup = [&](const std::string& partition, const std::vector<std::string>& hashes) {
    v1::LookupRequest request;
    request.set_partition(partition);
    for (const std::string& h : hashes) request.add_block_hashes(h);
    v1::LookupResponse response;
    grpc::ClientContext context;
    return stub_->Lookup(&context, request, &response);
  };
  const std::string p = cache::HashToBytes(c.partition);
  const std::string h = cache::HashToBytes(c.hashes[0]);
  grpc::Status s = lookup(p, {h, "short"});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("block_hashes[1]"));
  s = lookup("x", {h});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("partition"));
  s = lookup(p, std::vector<std::string>(9, h));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("max-chain-blocks"));
  {
    v1::FetchBlocksRequest request;
    request.set_partition(p);
    request.add_block_hashes(std::string(17, 'x'));
    grpc::ClientContext context;
    auto reader = stub_->FetchBlocks(&context, request);
    v1::FetchBlocksResponse response;
    while (reader->Read(&response)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  const int64_t size = static_cast<int64_t>(c.records[0].size());
  v1::StoreBlocksResponse response;
  s = RawStore({Chunk(&c.partition, 0, 0, size, c.records[0].substr(0, 10)),
                Chunk(nullptr, 0, 20, size, c.records[0].substr(20))},
               &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("chunks.offset"));
  s = RawStore({Chunk(&c.partition, 0, 0, int64_t{1} << 40, "abc")}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("max-record-bytes"));
  s = RawStore({Chunk(nullptr, 0, 0, size, c.records[0])}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("partition"));
  s = RawStore({Chunk(&c.partition, 1, 0, size, c.records[0])}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("chunks.index"));
  // The server is still fine.
  EXPECT_EQ(Store(c.partition, c.records), 2);
}

TEST_F(SessionCacheServiceTest, AuthRequiresAListedBearerTokenButHealthDoesNot) {
  ServerSetup setup;
  setup.auth = true;
  Start(setup);
  const BlockChain c = MakeChain(1, "");
  EXPECT_EQ(Store(c.partition, c.records), 1);
  for (const std::string& token :
       {std::string(), std::string("wrong"), std::string(kToken) + "x"}) {
    std::unique_ptr<RemoteCacheClient> other = NewClient(token);
    EXPECT_EQ(other->Lookup(c.partition, c.hashes, Deadline()).status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(other->Store(c.partition, c.records, Deadline()).status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(other->GetSession("x", nullptr, Deadline()).status().code(),
              absl::StatusCode::kUnauthenticated);
  }
  auto health = grpc::health::v1::Health::NewStub(client_->channel());
  for (const char* name : {"", kCacheReadinessService}) {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(name);
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(health->Check(&context, request, &response).ok());
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  EXPECT_THAT(MetricsText(), HasSubstr("code=\"UNAUTHENTICATED\""));
}

TEST_F(SessionCacheServiceTest, SessionRecordsPutGetListDeleteAndExpire) {
  ServerSetup setup;
  setup.service.max_session_tokens = 100;
  Start(setup);
  const BlockChain c = MakeChain(1, "");
  cache::RemoteSession s;
  s.id = "conv-1";
  s.partition = c.partition;
  s.tokens = {1, 2, 3, 4};
  s.turn_ends = {2, 4};
  s.has_head = true;
  s.head = c.hashes[0];
  s.owner = "replica-0";
  EXPECT_EQ(*client_->PutSession(s, 0, "", Deadline()), 1);
  s.id = "conv-2";
  s.ttl = absl::Seconds(10);
  EXPECT_EQ(*client_->PutSession(s, 0, "", Deadline()), 1);

  absl::StatusOr<cache::RemoteSession> got = client_->GetSession("conv-1", nullptr, Deadline());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tokens, s.tokens);
  EXPECT_EQ(got->turn_ends, s.turn_ends);
  EXPECT_TRUE(got->has_head);
  EXPECT_EQ(got->head, c.hashes[0]);
  EXPECT_EQ(got->owner, "replica-0");
  EXPECT_EQ(got->ttl, absl::Hours(1));  // the default TTL, nothing elapsed
  EXPECT_EQ(got->version, 1);
  EXPECT_FALSE(got->closed);

  v1::ListSessionsRequest list;
  list.set_page_size(1);
  std::vector<std::string> ids;
  do {
    v1::ListSessionsResponse page;
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->ListSessions(&context, list, &page).ok());
    for (const v1::SessionRecord& r : page.sessions()) {
      EXPECT_EQ(r.tokens_size(), 0);
      ids.push_back(r.session_id());
    }
    list.set_page_token(page.next_page_token());
  } while (!list.page_token().empty());
  EXPECT_EQ(ids, (std::vector<std::string>{"conv-1", "conv-2"}));

  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(client_->GetSession("conv-2", nullptr, Deadline()).status().code(),
            absl::StatusCode::kNotFound);
  // Deleting leaves a tombstone (session_semantics_test.cc has the details).
  EXPECT_TRUE(client_->DeleteSession("conv-1", Deadline()).ok());
  got = client_->GetSession("conv-1", nullptr, Deadline());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->closed);
  EXPECT_TRUE(got->tokens.empty());
  EXPECT_TRUE(client_->DeleteSession("conv-1", Deadline()).ok());

  s.ttl = absl::Hours(25);
  EXPECT_EQ(client_->PutSession(s, 0, "", Deadline()).status().code(),
            absl::StatusCode::kInvalidArgument);
  s.ttl = absl::ZeroDuration();
  s.tokens.assign(101, 1);
  s.turn_ends = {101};
  EXPECT_EQ(client_->PutSession(s, 0, "", Deadline()).status().code(),
            absl::StatusCode::kResourceExhausted);
  s.tokens = {1, 2};
  s.turn_ends = {3};
  EXPECT_EQ(client_->PutSession(s, 0, "", Deadline()).status().code(),
            absl::StatusCode::kInvalidArgument);
  s.turn_ends = {2};
  s.id = "";
  EXPECT_EQ(client_->PutSession(s, 0, "", Deadline()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SessionCacheServiceTest, EvictionUnderASmallMemoryKeepsChainsCoherent) {
  const BlockChain probe = MakeChain(1, "");
  ServerSetup setup;
  setup.memory_bytes = 12 * static_cast<int64_t>(probe.records[0].size());
  Start(setup);
  std::vector<BlockChain> chains;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    chains.push_back(MakeChain(5, "", seed));
    Store(chains.back().partition, chains.back().records);
    clock_.Advance(absl::Seconds(1));
  }
  int64_t present = 0;
  for (const BlockChain& c : chains) {
    const int32_t n = Lookup(c.partition, c.hashes);
    // Every block Lookup reports can be fetched: no reported block lost its parent.
    const std::vector<std::string> got = Fetch(c.partition, c.hashes);
    ASSERT_EQ(static_cast<int32_t>(got.size()), n);
    for (int32_t i = 0; i < n; ++i) EXPECT_EQ(got[i], c.records[i]);
    present += n;
  }
  absl::StatusOr<v1::CacheStats> stats = client_->GetStats(Deadline());
  EXPECT_LE(stats->bytes(), setup.memory_bytes);
  EXPECT_GT(stats->evicted_blocks_total(), 0);
  EXPECT_LE(present, stats->blocks());
}

}  // namespace
}  // namespace kvserve::cachesvc
