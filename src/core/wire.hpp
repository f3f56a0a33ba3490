// What clients see besides the payloads: the rules and frames of the pgbus
// wire format (README "Wire format"). The one home of the event-name rule,
// the connection-id format and every control frame (`pgbus:*`, no id line);
// the engine, the HTTP layer, the settings' check hook and SQL
// (pgbus_stream._wire_valid) call it. Frames are encoded by core/sse. Pure
// C++, no PostgreSQL. The gap notices' reasons:
// docs/ARCHITECTURE.md, "Gaps: what is announced".
#pragma once
#include "core/no_postgres.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pgbs::wire {

// ---- event names ---------------------------------------------------------------

// An event name is 1..kMaxEventName bytes of printable ASCII without spaces
// (letters, digits and !#$%&'*+-./:;<=>?@[]^_`{|}~ are all fine); audience
// labels follow the same rule.
constexpr size_t kMaxEventName = 64;
bool valid_event_name(std::string_view name);
// The rule in words, for error details.
constexpr const char *kEventNameRule =
    "Event names are 1 to 64 printable ASCII characters without spaces or line breaks.";

// ---- connection ids ------------------------------------------------------------

// A connection id as pgbus:connected shows it, connections() lists it and
// broadcast(exclude => ...) and disconnect(connection => ...) take it: 16
// lowercase hex digits, not all zero.
constexpr size_t kConnectionIdLen = 16;
std::string connection_id(uint64_t id);
// The same into out (kConnectionIdLen digits and a NUL), for a caller that
// must hold no C++ object (between PostgreSQL calls).
void format_connection_id(uint64_t id, char out[kConnectionIdLen + 1]) noexcept;
bool parse_connection_id(std::string_view text, uint64_t *id) noexcept;

// ---- control frames ----------------------------------------------------------

constexpr std::string_view kConnected = "pgbus:connected";
constexpr std::string_view kGapDetected = "pgbus:gap-detected";
constexpr std::string_view kShutdown = "pgbus:shutdown";
constexpr std::string_view kPresence = "pgbus:presence";

// {"connectionId":"<id>"}
std::string connected_frame(uint64_t conn_id);
// {"reason":"<reason>"}: the stream ends after it.
std::string shutdown_frame(std::string_view reason);

// Presence: connections of one stream by identity (the credential's sub;
// nullopt: anonymous), over every worker.
using PresenceCounts = std::map<std::optional<std::string>, int64_t>;
// {"stream":..,"action":"join"|"leave","sub":..|null,"count":n}
std::string presence_change_frame(std::string_view stream, const std::optional<std::string> &sub,
                                  bool joined, int64_t count);
// {"stream":..,"action":"snapshot","members":[{"sub":..|null,"count":n},...]}
std::string presence_snapshot_frame(std::string_view stream, const PresenceCounts &counts);

// ---- gap notices (pgbus:gap-detected) ----------------------------------------

enum class GapReason {
  Overflow,         // the connection's queue dropped frames (count: how many)
  Retention,        // retention removed rows the cursor had not reached (oldest: left)
  Deleted,          // committed rows gone from the table when read (ids)
  EphemeralExpired, // ephemeral broadcasts after the cursor no longer held
  EphemeralOverrun, // ephemeral broadcasts lost with ring events (count: how many)
  StreamRecreated,  // the cursor names an older incarnation of the stream
  Late,             // a row applied below what the position covers (ids)
  Unreadable,       // rows the worker cannot read, skipped (ids)
};
const char *gap_reason_name(GapReason r);

// What one notice says. Its JSON: "stream" (every reason but Overflow, which
// concerns the connection), "reason", the reason's detail ("ids", "lost",
// "dropped" or "oldest"), then "resume" unless it is Absent.
struct Gap {
  explicit Gap(GapReason r) : reason(r) {}
  static Gap ids_gone(GapReason r, std::vector<int64_t> ids); // Deleted, Late, Unreadable
  static Gap lost(uint64_t n);                                // EphemeralOverrun
  static Gap retention(std::optional<int64_t> oldest);        // nullopt: null (none left)
  static Gap overflow(uint64_t dropped, std::optional<std::string_view> resume);

  GapReason reason;
  std::vector<int64_t> ids;
  uint64_t count = 0;
  std::optional<int64_t> oldest;
  std::string_view stream;
  // The cursor to reconnect with (losing nothing more). Absent in the
  // notices of a connection's first bytes; Null when no frame was written.
  enum class Resume { Absent, Null, Cursor } resume = Resume::Absent;
  std::string_view cursor;
};
std::string gap_frame(const Gap &g);

} // namespace pgbs::wire
