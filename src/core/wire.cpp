// The pgbus wire format's rules and control frames (see wire.hpp).
#include "core/wire.hpp"

#include "core/sse.hpp"

#include <cinttypes>
#include <cstdio>

namespace pgbs::wire {
namespace {

std::string control_frame(std::string_view event, const std::string &json) {
  std::string out;
  sse::append_event(out, "", event, json);
  return out;
}

std::string quoted(std::string_view s) { return "\"" + sse::json_escape(s) + "\""; }

std::string sub_json(const std::optional<std::string> &sub) { return sub ? quoted(*sub) : "null"; }

std::string id_list(const std::vector<int64_t> &ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i)
    out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

} // namespace

bool valid_event_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxEventName)
    return false;
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= ' ' || c >= 0x7f) // controls, space, DEL and non-ASCII
      return false;
  }
  return true;
}

void format_connection_id(uint64_t id, char out[kConnectionIdLen + 1]) noexcept {
  snprintf(out, kConnectionIdLen + 1, "%016" PRIx64, id);
}

std::string connection_id(uint64_t id) {
  char buf[kConnectionIdLen + 1];
  format_connection_id(id, buf);
  return buf;
}

bool parse_connection_id(std::string_view text, uint64_t *id) noexcept {
  if (text.size() != kConnectionIdLen)
    return false;
  uint64_t v = 0;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
    v = v << 4 | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  if (v == 0)
    return false;
  *id = v;
  return true;
}

std::string connected_frame(uint64_t conn_id) {
  return control_frame(kConnected, "{\"connectionId\":\"" + connection_id(conn_id) + "\"}");
}

std::string shutdown_frame(std::string_view reason) {
  return control_frame(kShutdown, "{\"reason\":" + quoted(reason) + "}");
}

std::string presence_change_frame(std::string_view stream, const std::optional<std::string> &sub,
                                  bool joined, int64_t count) {
  return control_frame(kPresence, "{\"stream\":" + quoted(stream) + ",\"action\":\"" +
                                      (joined ? "join" : "leave") + "\",\"sub\":" + sub_json(sub) +
                                      ",\"count\":" + std::to_string(count) + "}");
}

std::string presence_snapshot_frame(std::string_view stream, const PresenceCounts &counts) {
  std::string members;
  for (const auto &[sub, n] : counts)
    members += (members.empty() ? "{\"sub\":" : ",{\"sub\":") + sub_json(sub) +
               ",\"count\":" + std::to_string(n) + "}";
  return control_frame(kPresence, "{\"stream\":" + quoted(stream) +
                                      ",\"action\":\"snapshot\",\"members\":[" + members + "]}");
}

const char *gap_reason_name(GapReason r) {
  switch (r) {
  case GapReason::Overflow:
    return "overflow";
  case GapReason::Retention:
    return "retention";
  case GapReason::Deleted:
    return "deleted";
  case GapReason::EphemeralExpired:
    return "ephemeral-expired";
  case GapReason::EphemeralOverrun:
    return "ephemeral-overrun";
  case GapReason::StreamRecreated:
    return "stream-recreated";
  case GapReason::Late:
    return "late";
  case GapReason::Unreadable:
    return "unreadable";
  }
  return "unknown";
}

Gap Gap::ids_gone(GapReason r, std::vector<int64_t> ids) {
  Gap g(r);
  g.ids = std::move(ids);
  return g;
}

Gap Gap::lost(uint64_t n) {
  Gap g(GapReason::EphemeralOverrun);
  g.count = n;
  return g;
}

Gap Gap::retention(std::optional<int64_t> oldest) {
  Gap g(GapReason::Retention);
  g.oldest = oldest;
  return g;
}

Gap Gap::overflow(uint64_t dropped, std::optional<std::string_view> resume) {
  Gap g(GapReason::Overflow);
  g.count = dropped;
  g.resume = resume ? Resume::Cursor : Resume::Null;
  g.cursor = resume.value_or(std::string_view());
  return g;
}

std::string gap_frame(const Gap &g) {
  std::string json = "{";
  if (g.reason != GapReason::Overflow)
    json += "\"stream\":" + quoted(g.stream) + ",";
  json += "\"reason\":\"" + std::string(gap_reason_name(g.reason)) + "\"";
  switch (g.reason) {
  case GapReason::Deleted:
  case GapReason::Late:
  case GapReason::Unreadable:
    json += ",\"ids\":" + id_list(g.ids);
    break;
  case GapReason::EphemeralOverrun:
    json += ",\"lost\":" + std::to_string(g.count);
    break;
  case GapReason::Overflow:
    json += ",\"dropped\":" + std::to_string(g.count);
    break;
  case GapReason::Retention:
    json += ",\"oldest\":" + (g.oldest ? std::to_string(*g.oldest) : std::string("null"));
    break;
  case GapReason::EphemeralExpired:
  case GapReason::StreamRecreated:
    break;
  }
  if (g.resume == Gap::Resume::Null)
    json += ",\"resume\":null";
  else if (g.resume == Gap::Resume::Cursor)
    json += ",\"resume\":" + quoted(g.cursor);
  return control_frame(kGapDetected, json + "}");
}

} // namespace pgbs::wire
