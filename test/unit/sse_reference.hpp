// A small event-stream parser written from the WHATWG HTML "Server-sent
// events" parsing rules, used to check what a browser would see in the bytes
// that sse.cpp produces. Shared by the unit tests and the fuzz targets.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pgbs::test {

struct SseEvent {
  std::string last_event_id; // the stream's last event id when this event fired
  std::string type;          // "" means the default "message"
  std::string data;
};

struct SseParse {
  std::vector<SseEvent> events;
  std::vector<std::string> comments;
  long retry = -1;
  size_t blank_lines = 0;
  std::string pending_data; // non-empty when bytes follow the last blank line
};

// Splits on CRLF, CR and LF; an unterminated last line goes to *tail.
inline std::vector<std::string_view> sse_lines(std::string_view s, std::string_view *tail) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\r' && s[i] != '\n')
      continue;
    lines.push_back(s.substr(start, i - start));
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')
      ++i;
    start = i + 1;
  }
  *tail = s.substr(start);
  return lines;
}

inline SseParse sse_parse(std::string_view s) {
  SseParse p;
  std::string_view tail;
  std::string data, type, id_buffer;
  bool have_fields = false;
  for (std::string_view line : sse_lines(s, &tail)) {
    if (line.empty()) {
      ++p.blank_lines;
      if (!data.empty()) {
        data.pop_back(); // the trailing LF added by the last data field
        p.events.push_back({id_buffer, type, data});
      }
      data.clear();
      type.clear();
      have_fields = false;
      continue;
    }
    if (line[0] == ':') {
      std::string_view text = line.substr(1);
      if (!text.empty() && text[0] == ' ')
        text.remove_prefix(1);
      p.comments.emplace_back(text);
      continue;
    }
    size_t colon = line.find(':');
    std::string_view field = line.substr(0, colon);
    std::string_view value;
    if (colon != std::string_view::npos) {
      value = line.substr(colon + 1);
      if (!value.empty() && value[0] == ' ')
        value.remove_prefix(1);
    }
    have_fields = true;
    if (field == "event") {
      type = std::string(value);
    } else if (field == "data") {
      data.append(value);
      data.push_back('\n');
    } else if (field == "id") {
      if (value.find('\0') == std::string_view::npos)
        id_buffer = std::string(value);
    } else if (field == "retry") {
      bool digits = !value.empty();
      for (char c : value)
        digits = digits && c >= '0' && c <= '9';
      if (digits && value.size() < 18)
        p.retry = std::stol(std::string(value));
    }
  }
  if (have_fields || !tail.empty())
    p.pending_data = "<fields after the last blank line>";
  return p;
}

// What a browser's event.data should be for a payload: line breaks become LF,
// NULs vanish (sse.cpp drops them before splitting).
inline std::string sse_expected_data(std::string_view payload) {
  std::string out;
  for (size_t i = 0; i < payload.size(); ++i) {
    char c = payload[i];
    if (c == '\0')
      continue;
    if (c == '\r') {
      size_t j = i + 1;
      while (j < payload.size() && payload[j] == '\0')
        ++j;
      if (j < payload.size() && payload[j] == '\n')
        i = j;
      out.push_back('\n');
      continue;
    }
    out.push_back(c);
  }
  return out;
}

} // namespace pgbs::test
