// libFuzzer target for core/sse and core/wire: whatever id, event and
// payload, one append_event produces exactly one well-formed event that a
// conforming EventSource parser reads back as the payload (line breaks
// normalised); a control frame naming any stream is one event of JSON data;
// a connection id that parses prints back as itself.
#include "core/sse.hpp"
#include "core/wire.hpp"
#include "sse_reference.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

void check(bool ok, const char *what) {
  if (ok)
    return;
  std::fprintf(stderr, "fuzz_sse: %s\n", what);
  std::abort();
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string without_breaks(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '\r' && c != '\n' && c != '\0')
      out.push_back(c);
  return out;
}

// Decodes what json_escape produced; returns false on anything it should not emit.
bool json_unescape(std::string_view s, std::string *out) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == '"')
      return false;
    if (c != '\\') {
      out->push_back(static_cast<char>(c));
      continue;
    }
    if (++i >= s.size())
      return false;
    switch (s[i]) {
    case '"':
      out->push_back('"');
      break;
    case '\\':
      out->push_back('\\');
      break;
    case 'b':
      out->push_back('\b');
      break;
    case 'f':
      out->push_back('\f');
      break;
    case 'n':
      out->push_back('\n');
      break;
    case 'r':
      out->push_back('\r');
      break;
    case 't':
      out->push_back('\t');
      break;
    case 'u': {
      if (i + 4 >= s.size() || s.substr(i + 1, 2) != "00")
        return false;
      const std::string hex(s.substr(i + 3, 2));
      out->push_back(static_cast<char>(std::strtol(hex.c_str(), nullptr, 16)));
      i += 4;
      break;
    }
    default:
      return false;
    }
  }
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  const std::string_view in(reinterpret_cast<const char *>(data) + 2, size - 2);
  const size_t id_len = std::min<size_t>(data[0] % 32, in.size());
  const size_t ev_len = std::min<size_t>(data[1] % 32, in.size() - id_len);
  const std::string_view id = in.substr(0, id_len);
  const std::string_view event = in.substr(id_len, ev_len);
  const std::string_view payload = in.substr(id_len + ev_len);

  std::string out;
  pgbs::sse::append_event(out, id, event, payload);

  check(out.find('\r') == std::string::npos, "CR in output");
  check(out.find('\0') == std::string::npos, "NUL in output");
  check(out.size() >= 2 && out.compare(out.size() - 2, 2, "\n\n") == 0,
        "event not ended by a blank line");
  size_t blank = 0, start = 0;
  while (start < out.size()) {
    const size_t end = out.find('\n', start);
    const std::string_view line(out.data() + start, end - start);
    if (line.empty())
      ++blank;
    else
      check(starts_with(line, "id: ") || starts_with(line, "event: ") || starts_with(line, "data:"),
            "line with an unexpected field");
    start = end + 1;
  }
  check(blank == 1, "not exactly one blank line");

  const pgbs::test::SseParse p = pgbs::test::sse_parse(out);
  check(p.events.size() == 1, "not exactly one event");
  check(p.events[0].data == pgbs::test::sse_expected_data(payload), "data changed");
  check(p.events[0].last_event_id == without_breaks(id), "id changed");
  check(p.events[0].type == without_breaks(event), "event name changed");
  check(p.comments.empty() && p.retry == -1, "payload produced a comment or retry");

  std::string comment;
  pgbs::sse::append_comment(comment, payload);
  const pgbs::test::SseParse pc = pgbs::test::sse_parse(comment);
  check(pc.events.empty() && pc.comments.size() == 1 && pc.blank_lines == 1,
        "comment is not one comment line");

  if (pgbs::wire::valid_event_name(event))
    check(without_breaks(event) == event && event.find(' ') == std::string_view::npos,
          "valid_event_name accepted a separator");

  pgbs::wire::Gap gap = pgbs::wire::Gap::retention(std::nullopt);
  gap.stream = payload;
  gap.resume = pgbs::wire::Gap::Resume::Cursor;
  gap.cursor = id;
  for (const std::string &frame :
       {pgbs::wire::gap_frame(gap), pgbs::wire::gap_frame(pgbs::wire::Gap::overflow(size, id)),
        pgbs::wire::shutdown_frame(payload), pgbs::wire::presence_change_frame(event, {}, true, 1)}) {
    const pgbs::test::SseParse pf = pgbs::test::sse_parse(frame);
    check(pf.events.size() == 1 && pf.events[0].type.compare(0, 6, "pgbus:") == 0 &&
              pf.events[0].last_event_id.empty() &&
              pf.events[0].data.find('\n') == std::string::npos,
          "a control frame is not one pgbus: event with one line of data");
  }

  uint64_t conn = 0;
  if (pgbs::wire::parse_connection_id(payload, &conn))
    check(conn != 0 && pgbs::wire::connection_id(conn) == payload,
          "a connection id does not print back as itself");

  std::string decoded;
  check(json_unescape(pgbs::sse::json_escape(payload), &decoded), "json_escape output invalid");
  check(decoded == payload, "json_escape does not round trip");
  return 0;
}
