// The commit ring's record format: the one place that knows the layout. The
// producer's commit callback writes records with write_record() (plain
// memcpy, nothing that can fail or allocate); the worker copies its unread
// span out with copy_span() and decodes it with parse(). Plain C++ without
// PostgreSQL headers, so the unit tests and the fuzzer reach it.
// docs/ARCHITECTURE.md, "The commit ring".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pgbs::ring {

// Row: a row committed into a stream's queue table (payload in the table).
// Inline: an ephemeral broadcast; its payload follows (no table row).
// RowInline: a table row whose payload was small enough to travel too.
// Late: a table row logical replication applied at or below what cursors of
// the stream may already cover (capture/applied.cpp); no payload.
// Aborted: ids msg_id .. exclude of a stream that a transaction (or one of
// its savepoints) inserted and rolled back: they will never become visible
// (docs/ARCHITECTURE.md, "The horizon"); no payload.
enum class Kind : uint32_t { Row = 1, Inline = 2, RowInline = 4, Late = 8, Aborted = 16 };

// One record. `len` is the whole record, 8-byte aligned; the payload (data,
// event, visible_to, back to back) follows the header.
struct Header {
  uint32_t len;
  Kind kind;
  uint32_t dboid;
  uint32_t data_len;
  int64_t stream_id;
  int64_t msg_id;
  int64_t commit_us; // GetCurrentTimestamp() at commit, for latency figures
  uint32_t event_len;
  uint32_t visible_len;
  // Inline records: the stream's ephemeral sequence number (1, 2, ...), so a
  // reader sees that ephemeral broadcasts were lost to a lap or an overrun.
  uint64_t ephemeral_seq;
  uint64_t exclude; // the connection that must not get this event (0: none); Aborted: last id
};

// Size of a record with this payload (header included, 8-byte aligned).
size_t record_size(uint32_t data_len, uint32_t event_len, uint32_t visible_len);

// Writes one record at absolute byte position `pos` of a ring of `cap`
// bytes, wrapping around. h.len must be record_size() of its lengths and
// `payload` must hold data_len + event_len + visible_len bytes.
void write_record(char *ring, uint64_t cap, uint64_t pos, const Header &h, const char *payload);

// Copies the span [pos, head) of the ring into *out. False when the span is
// longer than the ring (the reader was lapped: those records are gone).
bool copy_span(const char *ring, uint64_t cap, uint64_t pos, uint64_t head, std::vector<char> *out);

// A decoded record.
struct Event {
  int64_t stream_id = 0;
  int64_t msg_id = 0;
  int64_t commit_us = 0;
  bool has_payload = false; // data/event/visible_to below
  bool ephemeral = false;   // and no table row
  bool late = false;        // Kind::Late
  bool aborted = false;     // Kind::Aborted: ids msg_id .. aborted_to never become visible
  int64_t aborted_to = 0;
  uint64_t ephemeral_seq = 0;
  uint64_t exclude = 0; // the connection that must not get it (0: none)
  std::string data, event, visible_to;
};

// Decodes the records of `dboid` in buf[0, len) and appends them to *out;
// *records counts every record seen (any database). False when the span is
// malformed (stops there: never misparses).
bool parse(const char *buf, size_t len, uint32_t dboid, std::vector<Event> *out, uint64_t *records);

} // namespace pgbs::ring
