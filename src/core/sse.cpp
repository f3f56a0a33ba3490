// SSE frame encoding (pgbus wire format, README "Wire format").
//
// Every data line is written as "data: <line>\n", an empty line included
// ("data: \n"): one prefix for all lines keeps the loop branch-free, and a
// conforming EventSource strips the single space after the colon either way.
#include "core/sse.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace pgbs::sse {
namespace {

bool is_line_break_or_nul(char c) { return c == '\n' || c == '\r' || c == '\0'; }

bool has_line_break_or_nul(std::string_view s) {
  for (char c : s)
    if (is_line_break_or_nul(c))
      return true;
  return false;
}

// Appends "<prefix><value>\n" unless value is empty; CR/LF/NUL in value are
// dropped so that a field can never end the frame early.
void append_field(std::string &out, std::string_view prefix, std::string_view value) {
  if (value.empty())
    return;
  if (!has_line_break_or_nul(value)) {
    out.append(prefix);
    out.append(value);
    out.push_back('\n');
    return;
  }
  std::string clean;
  clean.reserve(value.size());
  for (char c : value)
    if (!is_line_break_or_nul(c))
      clean.push_back(c);
  if (clean.empty())
    return; // an empty "id: " would reset the browser's lastEventId
  out.append(prefix);
  out.append(clean);
  out.push_back('\n');
}

// True when the '\n' at data[i] completes a CRLF (NULs in between are ignored,
// since they are dropped from the output).
bool lf_follows_cr(std::string_view data, size_t i) {
  while (i > 0 && data[i - 1] == '\0')
    --i;
  return i > 0 && data[i - 1] == '\r';
}

constexpr std::string_view kData = "data: ";

// Reserves room for `extra` more bytes without defeating geometric growth
// when many frames are appended to one buffer.
void reserve_more(std::string &out, size_t extra) {
  const size_t need = out.size() + extra;
  if (need > out.capacity())
    out.reserve(std::max(need, 2 * out.capacity()));
}

// The usual payload has LF breaks only: split it with memchr.
void append_lf_lines(std::string &out, std::string_view data) {
  const char *p = data.data();
  const char *end = p + data.size();
  out.append(kData);
  const void *hit;
  while (p != end && (hit = std::memchr(p, '\n', static_cast<size_t>(end - p))) != nullptr) {
    const char *lf = static_cast<const char *>(hit);
    out.append(p, static_cast<size_t>(lf - p));
    out.push_back('\n');
    out.append(kData);
    p = lf + 1;
  }
  out.append(p, static_cast<size_t>(end - p));
  out.push_back('\n');
}

void append_data_lines(std::string &out, std::string_view data) {
  if (data.empty() || (!std::memchr(data.data(), '\r', data.size()) &&
                       !std::memchr(data.data(), '\0', data.size()))) {
    append_lf_lines(out, data);
    return;
  }
  out.append(kData);
  const char *p = data.data();
  size_t start = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const char c = p[i];
    if (static_cast<unsigned char>(c) > '\r' || !is_line_break_or_nul(c))
      continue;
    out.append(p + start, i - start);
    start = i + 1;
    if (c == '\0' || (c == '\n' && lf_follows_cr(data, i)))
      continue;
    out.push_back('\n');
    out.append(kData);
  }
  out.append(p + start, data.size() - start);
  out.push_back('\n');
}

} // namespace

void append_event(std::string &out, std::string_view id, std::string_view event,
                  std::string_view data) {
  reserve_more(out, id.size() + event.size() + data.size() + 32);
  append_field(out, "id: ", id);
  append_field(out, "event: ", event);
  append_data_lines(out, data);
  out.push_back('\n');
}

void append_event_one_line(std::string &out, std::string_view id, std::string_view event,
                           std::string_view data) {
  reserve_more(out, id.size() + event.size() + data.size() + 32);
  append_field(out, "id: ", id);
  append_field(out, "event: ", event);
  out.append(kData);
  for (char c : data)
    if (!is_line_break_or_nul(c))
      out.push_back(c);
  out.append("\n\n");
}

// "\ndata: " only ever starts a line: field values hold no line break.
bool has_one_data_line(std::string_view frame) {
  size_t n = frame.compare(0, kData.size(), kData) == 0 ? 1 : 0;
  for (size_t at = frame.find("\ndata: "); at != std::string_view::npos;
       at = frame.find("\ndata: ", at + 1))
    if (++n > 1)
      return false;
  return true;
}

// A frame of append_event has no line break inside a field, so its lines are
// the optional id and event lines, the data lines, then the empty line.
std::string one_line_frame(std::string_view frame) {
  std::string out;
  out.reserve(frame.size());
  size_t pos = 0;
  bool in_data = false;
  while (pos < frame.size()) {
    size_t eol = frame.find('\n', pos);
    if (eol == std::string_view::npos)
      eol = frame.size();
    const std::string_view line = frame.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty())
      break;
    if (line.compare(0, kData.size(), kData) == 0) {
      if (!in_data)
        out.append(kData);
      in_data = true;
      out.append(line.substr(kData.size()));
      continue;
    }
    out.append(line);
    out.push_back('\n');
  }
  if (!in_data)
    out.append(kData);
  out.append("\n\n");
  return out;
}

void append_comment(std::string &out, std::string_view text) {
  reserve_more(out, text.size() + 4);
  out.append(": ");
  for (char c : text)
    out.push_back(is_line_break_or_nul(c) ? ' ' : c);
  out.append("\n\n");
}

void append_retry(std::string &out, long ms) {
  // The field is ignored by browsers unless it is all digits.
  if (ms < 0)
    ms = 0;
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof buf, ms);
  out.append("retry: ");
  out.append(buf, static_cast<size_t>(res.ptr - buf));
  out.append("\n\n");
}

std::string json_escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 8);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
    case '"':
      out.append("\\\"");
      break;
    case '\\':
      out.append("\\\\");
      break;
    case '\b':
      out.append("\\b");
      break;
    case '\f':
      out.append("\\f");
      break;
    case '\n':
      out.append("\\n");
      break;
    case '\r':
      out.append("\\r");
      break;
    case '\t':
      out.append("\\t");
      break;
    default:
      if (c < 0x20) {
        const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        out.append(esc, sizeof esc);
      } else {
        out.push_back(ch);
      }
    }
  }
  return out;
}

} // namespace pgbs::sse
