// The commit ring's record format (src/shmem/ring_record.*): what the
// producer writes is what the worker reads, across the wrap-around, with
// laps detected and malformed spans refused.
#include "shmem/ring_record.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include <string>
#include <vector>

using namespace pgbs::ring;

namespace {

// A ring of `cap` bytes and its head, written the way the commit callback does.
struct Ring {
  explicit Ring(size_t cap) : bytes(cap, '\x55'), cap(cap) {}
  std::vector<char> bytes;
  uint64_t cap, head = 0;
  void put(uint32_t db, Kind kind, int64_t stream, int64_t msg, const std::string &data,
           const std::string &event = "", const std::string &vis = "", uint64_t seq = 0) {
    Header h{};
    h.kind = kind;
    h.dboid = db;
    h.stream_id = stream;
    h.msg_id = msg;
    h.commit_us = 7;
    h.data_len = (uint32_t)data.size();
    h.event_len = (uint32_t)event.size();
    h.visible_len = (uint32_t)vis.size();
    h.ephemeral_seq = seq;
    h.len = (uint32_t)record_size(h.data_len, h.event_len, h.visible_len);
    const std::string payload = data + event + vis;
    write_record(bytes.data(), cap, head, h, payload.data());
    head += h.len;
  }
};

std::vector<Event> read_all(const Ring &r, uint64_t pos, uint32_t db, bool *lapped,
                            uint64_t *records) {
  std::vector<char> span;
  *lapped = !copy_span(r.bytes.data(), r.cap, pos, r.head, &span);
  std::vector<Event> out;
  if (!*lapped) {
    EXPECT_TRUE(parse(span.data(), span.size(), db, &out, records));
  }
  return out;
}

} // namespace

TEST(RingRecord, SizeIsAlignedAndCoversThePayload) {
  EXPECT_EQ(record_size(0, 0, 0) % 8, 0u);
  EXPECT_GE(record_size(0, 0, 0), sizeof(Header));
  EXPECT_EQ(record_size(1, 0, 0), record_size(8, 0, 0));
  EXPECT_GE(record_size(3, 2, 1), sizeof(Header) + 6);
}

TEST(RingRecord, RoundTripAcrossTheWrapAround) {
  Ring r(512);
  r.head = 480; // the next records straddle the end of the ring
  const uint64_t start = r.head;
  r.put(1, Kind::Inline, 5, 10, "hello\nworld", "evt", "admins", 3);
  r.put(1, Kind::Row, 5, 11, "");
  r.put(2, Kind::RowInline, 6, 12, "other database");
  r.put(1, Kind::RowInline, 5, 13, std::string(100, 'x'), "e");
  bool lapped;
  uint64_t records = 0;
  std::vector<Event> ev = read_all(r, start, 1, &lapped, &records);
  ASSERT_FALSE(lapped);
  EXPECT_EQ(records, 4u); // every record counted, any database
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_TRUE(ev[0].has_payload && ev[0].ephemeral);
  EXPECT_EQ(ev[0].msg_id, 10);
  EXPECT_EQ(ev[0].data, "hello\nworld");
  EXPECT_EQ(ev[0].event, "evt");
  EXPECT_EQ(ev[0].visible_to, "admins");
  EXPECT_EQ(ev[0].ephemeral_seq, 3u);
  EXPECT_FALSE(ev[1].has_payload);
  EXPECT_EQ(ev[1].msg_id, 11);
  EXPECT_TRUE(ev[2].has_payload && !ev[2].ephemeral);
  EXPECT_EQ(ev[2].ephemeral_seq, 0u); // only ephemeral records carry the number
  EXPECT_EQ(ev[2].data, std::string(100, 'x'));
  EXPECT_EQ(ev[2].commit_us, 7);
}

TEST(RingRecord, LateRecordCarriesItsIdOnly) {
  Ring r(256);
  const uint64_t start = r.head;
  r.put(1, Kind::Late, 5, 9, "");
  r.put(1, Kind::Row, 5, 12, "");
  bool lapped;
  uint64_t records = 0;
  std::vector<Event> ev = read_all(r, start, 1, &lapped, &records);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_TRUE(ev[0].late);
  EXPECT_FALSE(ev[0].has_payload);
  EXPECT_EQ(ev[0].msg_id, 9);
  EXPECT_FALSE(ev[1].late);
}

TEST(RingRecord, LapIsDetected) {
  Ring r(256);
  const uint64_t reader = r.head;
  for (int i = 0; i < 10; ++i)
    r.put(1, Kind::Row, 1, i + 1, "");
  bool lapped;
  uint64_t records = 0;
  read_all(r, reader, 1, &lapped, &records);
  EXPECT_TRUE(lapped); // more than the ring holds was written since
  const uint64_t recent = r.head - 2 * record_size(0, 0, 0);
  std::vector<Event> ev = read_all(r, recent, 1, &lapped, &records);
  ASSERT_FALSE(lapped);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].msg_id, 10);
}

TEST(RingRecord, OversizeOrMalformedSpansAreRefused) {
  Ring r(1024);
  r.put(1, Kind::RowInline, 1, 1, std::string(300, 'p'));
  std::vector<char> span;
  ASSERT_TRUE(copy_span(r.bytes.data(), r.cap, 0, r.head, &span));
  std::vector<Event> out;
  uint64_t records = 0;
  // A record longer than the span (torn), and one whose payload exceeds its length.
  EXPECT_FALSE(parse(span.data(), span.size() - 8, 1, &out, &records));
  Header h;
  memcpy(&h, span.data(), sizeof(h));
  h.data_len = h.len; // claims more payload than the record holds
  memcpy(span.data(), &h, sizeof(h));
  out.clear();
  EXPECT_FALSE(parse(span.data(), span.size(), 1, &out, &records));
  EXPECT_TRUE(out.empty());
  // An empty span is fine.
  EXPECT_TRUE(parse(span.data(), 0, 1, &out, &records));
}
