// Cursor tokens: the SSE `id:` that says exactly what a client has seen
// (docs/ARCHITECTURE.md, "The horizon"). Pure C++, no PostgreSQL.
//
// Per stream the state is a horizon H (every msg_id <= H has been delivered or
// will never be visible) plus the ids delivered above H, kept as ranges.
//
// Text form of one stream:   [<epoch>~]<H>[_<range>(.<range>)*]
//   where <range> is <a> or <a>-<b> (a < b), ranges ascending, all > H,
//   disjoint and not adjacent to each other or to H.
//   examples: "42", "7~42", "7~42_44", "7~42_44-1000.1002"
// Several streams:            <name>:<one stream>(,<name>:<one stream>)*
//   example: "chat:7~42,news:9~7_9"
// or, as the server writes them (names can be long, epochs are short and
// unique): <epoch>~<one stream>(,<epoch>~<one stream>)*, e.g. "7~42,9~7_9".
// A plain integer "N" (what pgbus clients send) means H = N, nothing above,
// epoch unknown (0). Only letters, digits and "-._~:," ever appear.
#pragma once
#include "core/no_postgres.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pgbs::cursor {

constexpr size_t kMaxTokenBytes = 255;   // one stream's position stays under 256 bytes
constexpr size_t kMaxCursorBytes = 8192; // a whole cursor (several streams)

// What a client has seen of one stream.
class StreamPosition {
public:
  int64_t epoch = 0;   // 0 = unknown (plain integer cursor)
  int64_t horizon = 0; // every id <= horizon is covered

  // Ids above the horizon, as sorted, disjoint, non-adjacent [lo, hi] ranges.
  const std::vector<std::pair<int64_t, int64_t>> &ranges() const { return ranges_; }

  bool covers(int64_t id) const; // id <= horizon or inside a range
  void add(int64_t id);          // marks id seen; merges ranges; folds into horizon when adjacent
  void add_range(int64_t lo, int64_t hi); // marks every id of [lo, hi] seen (as add() each)
  void advance(int64_t h); // raises the horizon to h (never lowers); drops/folds ranges <= h
  size_t range_count() const { return ranges_.size(); }
  int64_t highest() const; // highest covered id (horizon if no ranges)
  bool operator==(const StreamPosition &o) const;

  // Appends the text form of this stream position (with "<epoch>~" when epoch != 0).
  // epoch and horizon are expected >= 0 (they are unless assigned negative values).
  void encode(std::string &out) const;
  // Length of what encode() appends, without building it (to enforce kMaxTokenBytes).
  size_t encoded_size() const;

private:
  void fold_into_horizon(); // absorbs ranges that touch or fall below the horizon

  std::vector<std::pair<int64_t, int64_t>> ranges_;
  friend bool parse_stream(std::string_view, StreamPosition *, std::string *);
};

// Parses one stream position. Rejects: empty, signs, leading '+', spaces,
// floats, values > INT64_MAX, ranges not ascending / overlapping / not above
// H, anything over kMaxTokenBytes, and an explicit epoch 0 ("0~5"). Accepted
// and normalised: ranges adjacent to each other or to H ("5_6" is "6"), "a-a",
// leading zeros. On failure returns false, leaves *out alone and sets *err (if
// not null) to a short reason suitable for a 400 body ("cursor: ...").
bool parse_stream(std::string_view text, StreamPosition *out, std::string *err);

// A cursor for one or more streams.
struct Cursor {
  // For a single-stream token without a name, name is empty.
  std::vector<std::pair<std::string, StreamPosition>> streams;
  const StreamPosition *find(std::string_view name) const; // exact name, or the unnamed entry
};

// Parses a whole cursor (single unnamed stream, name:pos,name:pos, or
// epoch~pos,epoch~pos: unnamed entries with distinct epochs). Stream
// names in a token are 1..kMaxStreamName chars of [A-Za-z0-9_.-] (and no
// duplicates). Empty / blank text is not a cursor: callers treat it as absent.
bool parse(std::string_view text, Cursor *out, std::string *err);

// Encodes a multi-stream cursor ("name:pos,..."); for exactly one stream with
// an empty name, just the position.
std::string encode(const Cursor &c);

// Strict non-negative integer (for ?replay=N and similar): digits only,
// 1..19 digits, <= INT64_MAX.
bool parse_int64(std::string_view text, int64_t *out);

constexpr size_t kMaxStreamName = 128;
// [A-Za-z0-9_.-]{1,128}, starting with a letter, a digit or '_'.
bool valid_stream_name(std::string_view name);

} // namespace pgbs::cursor
