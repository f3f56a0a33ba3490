// Cursor tokens (docs/ARCHITECTURE.md, "The horizon"): parsing is strict about anything ambiguous
// (signs, overlap, descending ranges, ranges at or below the horizon) and
// lenient only where the meaning is unique: a range adjacent to the previous
// one or to the horizon, and "a-a", are accepted and normalised, and leading
// zeros are read as the number they spell.
#include "core/cursor.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

namespace pgbs::cursor {
namespace {

using Range = std::pair<int64_t, int64_t>;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr size_t kMaxDigits = 19; // INT64_MAX has 19 digits

bool is_digit(char c) { return c >= '0' && c <= '9'; }

void set_err(std::string *err, const char *msg) {
  if (err)
    *err = msg;
}

enum class NumStatus { Ok, NotANumber, TooLarge };

// Reads the run of digits starting at s[*pos] and advances *pos past it.
NumStatus read_number(std::string_view s, size_t *pos, int64_t *out) {
  const size_t start = *pos;
  size_t i = start;
  while (i < s.size() && is_digit(s[i]))
    ++i;
  *pos = i;
  if (i == start)
    return NumStatus::NotANumber;
  if (i - start > kMaxDigits)
    return NumStatus::TooLarge;
  uint64_t v = 0; // 19 decimal digits always fit in 64 unsigned bits
  for (size_t k = start; k < i; ++k)
    v = v * 10 + static_cast<uint64_t>(s[k] - '0');
  if (v > static_cast<uint64_t>(kMax))
    return NumStatus::TooLarge;
  *out = static_cast<int64_t>(v);
  return NumStatus::Ok;
}

bool read_number_or_err(std::string_view s, size_t *pos, int64_t *out, std::string *err) {
  switch (read_number(s, pos, out)) {
  case NumStatus::Ok:
    return true;
  case NumStatus::NotANumber:
    set_err(err, "cursor: not a number");
    return false;
  case NumStatus::TooLarge:
    set_err(err, "cursor: number too large");
    return false;
  }
  return false;
}

void append_int(std::string &out, int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(res.ptr - buf));
}

size_t int_width(int64_t v) {
  size_t n = v < 0 ? 2 : 1;
  uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  while (u >= 10) {
    u /= 10;
    ++n;
  }
  return n;
}

bool is_blank(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\v' && c != '\f')
      return false;
  return true;
}

bool is_name_char(char c) {
  return is_digit(c) || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == '.' ||
         c == '-';
}

} // namespace

bool StreamPosition::covers(int64_t id) const {
  if (id <= horizon)
    return true;
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), id,
                             [](const Range &r, int64_t v) { return r.second < v; });
  return it != ranges_.end() && it->first <= id;
}

// Absorbs leading ranges that touch the horizon. With canonical ranges this
// runs at most once; the loop keeps it right after advance() as well.
void StreamPosition::fold_into_horizon() {
  size_t n = 0;
  while (n < ranges_.size() && ranges_[n].first - 1 <= horizon) {
    horizon = std::max(horizon, ranges_[n].second);
    ++n;
  }
  if (n)
    ranges_.erase(ranges_.begin(), ranges_.begin() + static_cast<std::ptrdiff_t>(n));
}

void StreamPosition::add(int64_t id) {
  if (id <= horizon)
    return;
  // id > horizon, so id - 1 cannot overflow below.
  if (ranges_.empty() || id > ranges_.back().second) {
    // Live delivery is in commit order, so this is the usual case.
    if (ranges_.empty()) {
      if (id - 1 == horizon)
        horizon = id;
      else
        ranges_.emplace_back(id, id);
    } else if (id - 1 == ranges_.back().second) {
      ranges_.back().second = id;
    } else {
      ranges_.emplace_back(id, id);
    }
    return;
  }
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), id,
                             [](const Range &r, int64_t v) { return r.second < v; });
  if (it->first <= id)
    return; // already inside a range
  const bool joins_next = it->first - 1 == id;
  const bool joins_prev =
      it == ranges_.begin() ? id - 1 == horizon : std::prev(it)->second == id - 1;
  if (joins_prev && joins_next) {
    if (it == ranges_.begin()) {
      horizon = it->second;
    } else {
      std::prev(it)->second = it->second;
    }
    ranges_.erase(it);
  } else if (joins_prev) {
    if (it == ranges_.begin())
      horizon = id;
    else
      std::prev(it)->second = id;
  } else if (joins_next) {
    it->first = id;
  } else {
    ranges_.insert(it, Range(id, id));
  }
}

void StreamPosition::add_range(int64_t lo, int64_t hi) {
  if (hi <= horizon)
    return;
  lo = std::max(lo, horizon + 1); // horizon < hi, so no overflow
  if (lo >= hi) {
    add(hi);
    return;
  }
  // The ranges that overlap [lo, hi] or touch it merge with it.
  auto first = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                                [](const Range &r, int64_t v) { return r.second < v - 1; });
  auto last = first;
  for (; last != ranges_.end() && last->first - 1 <= hi; ++last) {
    lo = std::min(lo, last->first);
    hi = std::max(hi, last->second);
  }
  first = ranges_.erase(first, last);
  ranges_.insert(first, Range(lo, hi));
  fold_into_horizon();
}

void StreamPosition::advance(int64_t h) {
  if (h <= horizon)
    return;
  horizon = h;
  auto it =
      std::find_if(ranges_.begin(), ranges_.end(), [h](const Range &r) { return r.second > h; });
  ranges_.erase(ranges_.begin(), it);
  fold_into_horizon();
}

int64_t StreamPosition::highest() const {
  return ranges_.empty() ? horizon : std::max(horizon, ranges_.back().second);
}

bool StreamPosition::operator==(const StreamPosition &o) const {
  return epoch == o.epoch && horizon == o.horizon && ranges_ == o.ranges_;
}

void StreamPosition::encode(std::string &out) const {
  if (epoch != 0) {
    append_int(out, epoch);
    out.push_back('~');
  }
  append_int(out, horizon);
  char sep = '_';
  for (const Range &r : ranges_) {
    out.push_back(sep);
    sep = '.';
    append_int(out, r.first);
    if (r.second != r.first) {
      out.push_back('-');
      append_int(out, r.second);
    }
  }
}

size_t StreamPosition::encoded_size() const {
  size_t n = int_width(horizon);
  if (epoch != 0)
    n += int_width(epoch) + 1;
  for (const Range &r : ranges_) {
    n += 1 + int_width(r.first);
    if (r.second != r.first)
      n += 1 + int_width(r.second);
  }
  return n;
}

bool parse_stream(std::string_view text, StreamPosition *out, std::string *err) {
  if (text.empty()) {
    set_err(err, "cursor: empty");
    return false;
  }
  if (text.size() > kMaxTokenBytes) {
    set_err(err, "cursor: too long");
    return false;
  }
  StreamPosition pos;
  size_t i = 0;
  int64_t first = 0;
  if (!read_number_or_err(text, &i, &first, err))
    return false;
  if (i < text.size() && text[i] == '~') {
    if (first == 0) {
      set_err(err, "cursor: epoch must be positive");
      return false;
    }
    pos.epoch = first;
    ++i;
    if (!read_number_or_err(text, &i, &pos.horizon, err))
      return false;
  } else {
    pos.horizon = first;
  }
  if (i < text.size() && text[i] == '_') {
    do {
      ++i; // the '_' or '.' before this range
      int64_t lo = 0, hi = 0;
      if (!read_number_or_err(text, &i, &lo, err))
        return false;
      hi = lo;
      if (i < text.size() && text[i] == '-') {
        ++i;
        if (!read_number_or_err(text, &i, &hi, err))
          return false;
        if (hi < lo) {
          set_err(err, "cursor: descending range");
          return false;
        }
      }
      if (lo <= pos.horizon) {
        set_err(err, "cursor: range not above horizon");
        return false;
      }
      if (!pos.ranges_.empty() && lo <= pos.ranges_.back().second) {
        set_err(err, "cursor: ranges overlap or descend");
        return false;
      }
      if (!pos.ranges_.empty() && lo - 1 == pos.ranges_.back().second)
        pos.ranges_.back().second = hi; // adjacent: merge
      else
        pos.ranges_.emplace_back(lo, hi);
    } while (i < text.size() && text[i] == '.');
    pos.fold_into_horizon();
  }
  if (i != text.size()) {
    set_err(err, "cursor: unexpected character");
    return false;
  }
  *out = std::move(pos);
  return true;
}

const StreamPosition *Cursor::find(std::string_view name) const {
  const StreamPosition *unnamed = nullptr;
  for (const auto &entry : streams) {
    if (entry.first == name)
      return &entry.second;
    if (entry.first.empty())
      unnamed = &entry.second;
  }
  return unnamed;
}

bool parse(std::string_view text, Cursor *out, std::string *err) {
  if (is_blank(text)) {
    set_err(err, "cursor: empty");
    return false;
  }
  if (text.size() > kMaxCursorBytes) {
    set_err(err, "cursor: too long");
    return false;
  }
  Cursor c;
  if (text.find(':') == std::string_view::npos) {
    // One position, or several that each name their stream by epoch.
    size_t start = 0;
    while (true) {
      size_t end = text.find(',', start);
      if (end == std::string_view::npos)
        end = text.size();
      StreamPosition pos;
      if (!parse_stream(text.substr(start, end - start), &pos, err))
        return false;
      const bool list = end != text.size() || start > 0;
      if (list && pos.epoch == 0) {
        set_err(err, "cursor: missing stream name");
        return false;
      }
      for (const auto &entry : c.streams)
        if (entry.second.epoch == pos.epoch) {
          set_err(err, "cursor: duplicate stream");
          return false;
        }
      c.streams.emplace_back(std::string(), std::move(pos));
      if (end == text.size())
        break;
      start = end + 1;
    }
    *out = std::move(c);
    return true;
  }
  size_t start = 0;
  while (true) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos)
      end = text.size();
    const std::string_view item = text.substr(start, end - start);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      set_err(err, "cursor: missing stream name");
      return false;
    }
    const std::string_view name = item.substr(0, colon);
    if (!valid_stream_name(name)) {
      set_err(err, "cursor: bad stream name");
      return false;
    }
    for (const auto &entry : c.streams) {
      if (entry.first == name) {
        set_err(err, "cursor: duplicate stream");
        return false;
      }
    }
    StreamPosition pos;
    if (!parse_stream(item.substr(colon + 1), &pos, err))
      return false;
    c.streams.emplace_back(std::string(name), std::move(pos));
    if (end == text.size())
      break;
    start = end + 1;
  }
  *out = std::move(c);
  return true;
}

std::string encode(const Cursor &c) {
  std::string out;
  if (c.streams.size() == 1 && c.streams[0].first.empty()) {
    c.streams[0].second.encode(out);
    return out;
  }
  for (const auto &entry : c.streams) {
    if (!out.empty())
      out.push_back(',');
    if (!entry.first.empty()) { // unnamed entries name their stream by epoch
      out.append(entry.first);
      out.push_back(':');
    }
    entry.second.encode(out);
  }
  return out;
}

bool parse_int64(std::string_view text, int64_t *out) {
  size_t i = 0;
  int64_t v = 0;
  if (read_number(text, &i, &v) != NumStatus::Ok || i != text.size())
    return false;
  *out = v;
  return true;
}

bool valid_stream_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxStreamName)
    return false;
  const char first = name[0];
  if (first == '.' || first == '-')
    return false;
  for (char c : name)
    if (!is_name_char(c))
      return false;
  return true;
}

} // namespace pgbs::cursor
