// Unit tests for core/metrics: /metrics must be valid Prometheus text format
// 0.0.4 and /stats.json valid JSON. Both are read back with small strict
// parsers written here (not with string searches), so a malformed line, a
// sample before its TYPE, a non-cumulative histogram or a bad escape fails.
#include "core/metrics.hpp"
#include "http/status_page.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

using pgbs::metrics::kLatencyBuckets;
using pgbs::metrics::render_json;
using pgbs::metrics::render_prometheus;
using pgbs::metrics::Snapshot;
using pgbs::metrics::StreamFigures;

namespace {

// ---- a strict reader of the Prometheus text exposition format 0.0.4 ----

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value;
};

struct Family {
  std::string type, help;
  std::vector<Sample> samples;
};

struct Exposition {
  std::map<std::string, Family> families;
  std::vector<std::string> order; // family names as declared

  const Family &family(const std::string &name) const {
    auto it = families.find(name);
    if (it == families.end())
      throw std::runtime_error("no family " + name);
    return it->second;
  }
  // The value of the one sample named `name` with exactly `labels`.
  double value(const std::string &name, const std::map<std::string, std::string> &labels) const {
    for (const auto &[fname, f] : families)
      for (const Sample &s : f.samples)
        if (s.name == name && s.labels == labels)
          return s.value;
    throw std::runtime_error("no sample " + name);
  }
};

[[noreturn]] void fail(size_t line_no, const std::string &why, const std::string &line) {
  throw std::runtime_error("line " + std::to_string(line_no) + ": " + why + ": " + line);
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

// Reads [a-zA-Z_:][a-zA-Z0-9_:]* at pos (label names: no ':').
std::string read_name(const std::string &l, size_t *pos, bool label) {
  size_t p = *pos;
  if (p >= l.size() || !is_name_start(l[p]) || (label && l[p] == ':'))
    return "";
  while (p < l.size() && is_name_char(l[p]) && !(label && l[p] == ':'))
    p++;
  std::string n = l.substr(*pos, p - *pos);
  *pos = p;
  return n;
}

// A sample value as the format allows it: a Go float, "+Inf", "-Inf", "NaN".
bool parse_value(const std::string &v, double *out) {
  if (v == "+Inf" || v == "Inf") {
    *out = INFINITY;
    return true;
  }
  if (v == "-Inf") {
    *out = -INFINITY;
    return true;
  }
  if (v == "NaN") {
    *out = NAN;
    return true;
  }
  if (v.empty() || v.find_first_not_of("0123456789+-.eE") != std::string::npos)
    return false;
  char *end = nullptr;
  *out = std::strtod(v.c_str(), &end);
  return end == v.c_str() + v.size();
}

// The family a sample name belongs to, given the declared types.
std::string family_of(const std::map<std::string, Family> &fams, const std::string &name) {
  if (fams.count(name) && fams.at(name).type != "histogram")
    return name;
  for (const char *suffix : {"_bucket", "_sum", "_count"}) {
    const std::string sfx = suffix;
    if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
      std::string base = name.substr(0, name.size() - sfx.size());
      if (fams.count(base) && fams.at(base).type == "histogram")
        return base;
    }
  }
  return "";
}

// Checks the histogram rules for one family: per label set (without le),
// buckets in increasing le order, cumulative, ending with le="+Inf", whose
// count equals _count; one _sum.
void check_histogram(const std::string &name, const Family &f) {
  struct Series {
    std::vector<std::pair<double, double>> buckets; // (le, count)
    int sums = 0, counts = 0;
    double count = NAN;
  };
  std::map<std::map<std::string, std::string>, Series> series;
  for (const Sample &s : f.samples) {
    auto labels = s.labels;
    if (s.name == name + "_bucket") {
      auto it = labels.find("le");
      if (it == labels.end())
        throw std::runtime_error(name + ": bucket without le");
      double le;
      if (!parse_value(it->second, &le) || std::isnan(le))
        throw std::runtime_error(name + ": bad le '" + it->second + "'");
      labels.erase(it);
      series[labels].buckets.emplace_back(le, s.value);
    } else {
      if (labels.count("le"))
        throw std::runtime_error(name + ": le on " + s.name);
      if (s.name == name + "_sum")
        series[labels].sums++;
      else {
        series[labels].counts++;
        series[labels].count = s.value;
      }
    }
  }
  for (const auto &[labels, sr] : series) {
    if (sr.sums != 1 || sr.counts != 1)
      throw std::runtime_error(name + ": each series needs one _sum and one _count");
    if (sr.buckets.empty() || !std::isinf(sr.buckets.back().first))
      throw std::runtime_error(name + ": buckets must end with le=\"+Inf\"");
    for (size_t i = 1; i < sr.buckets.size(); i++) {
      if (!(sr.buckets[i].first > sr.buckets[i - 1].first))
        throw std::runtime_error(name + ": le not increasing");
      if (sr.buckets[i].second < sr.buckets[i - 1].second)
        throw std::runtime_error(name + ": buckets not cumulative");
    }
    if (sr.buckets.back().second != sr.count)
      throw std::runtime_error(name + ": +Inf bucket != _count");
  }
}

Exposition parse_exposition(const std::string &text) {
  Exposition e;
  std::set<std::string> series_seen;
  std::string current;          // family whose samples are being read
  std::set<std::string> closed; // families whose samples ended
  if (text.empty() || text.back() != '\n')
    throw std::runtime_error("the document must end with a line feed");
  size_t start = 0, line_no = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    const std::string l = text.substr(start, nl - start);
    start = nl + 1;
    line_no++;
    if (l.empty())
      fail(line_no, "empty line", l);
    if (l.find('\r') != std::string::npos || l.find('\t') != std::string::npos)
      fail(line_no, "CR or tab", l);
    if (l[0] == '#') {
      // "# HELP name text" or "# TYPE name type"; nothing else is emitted.
      const bool help = l.compare(0, 7, "# HELP ") == 0, type = l.compare(0, 7, "# TYPE ") == 0;
      if (!help && !type)
        fail(line_no, "unexpected comment", l);
      size_t p = 7;
      const std::string name = read_name(l, &p, false);
      if (name.empty() || p >= l.size() || l[p] != ' ')
        fail(line_no, "bad metric name in comment", l);
      const std::string rest = l.substr(p + 1);
      if (closed.count(name) || (e.families.count(name) && !e.families[name].samples.empty()))
        fail(line_no, "HELP/TYPE after the family's samples", l);
      if (!current.empty() && current != name)
        closed.insert(current);
      current = name;
      Family &f = e.families[name];
      if (f.type.empty() && f.help.empty())
        e.order.push_back(name);
      if (help) {
        if (!f.help.empty())
          fail(line_no, "second HELP", l);
        if (rest.empty())
          fail(line_no, "empty HELP", l);
        f.help = rest;
      } else {
        if (!f.type.empty())
          fail(line_no, "second TYPE", l);
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                     "untyped"};
        if (!kTypes.count(rest))
          fail(line_no, "unknown type", l);
        f.type = rest;
      }
      continue;
    }
    Sample s;
    size_t p = 0;
    s.name = read_name(l, &p, false);
    if (s.name.empty())
      fail(line_no, "bad metric name", l);
    if (p < l.size() && l[p] == '{') {
      p++;
      while (p < l.size() && l[p] != '}') {
        const std::string key = read_name(l, &p, true);
        if (key.empty() || p + 1 >= l.size() || l[p] != '=' || l[p + 1] != '"')
          fail(line_no, "bad label", l);
        p += 2;
        std::string value;
        for (;; p++) {
          if (p >= l.size())
            fail(line_no, "unterminated label value", l);
          if (l[p] == '"')
            break;
          if (l[p] != '\\') {
            value.push_back(l[p]);
            continue;
          }
          if (++p >= l.size())
            fail(line_no, "dangling backslash", l);
          if (l[p] == '\\' || l[p] == '"')
            value.push_back(l[p]);
          else if (l[p] == 'n')
            value.push_back('\n');
          else
            fail(line_no, "bad escape", l);
        }
        p++; // closing quote
        if (!s.labels.emplace(key, value).second)
          fail(line_no, "repeated label", l);
        if (p < l.size() && l[p] == ',')
          p++;
        else if (p >= l.size() || l[p] != '}')
          fail(line_no, "expected , or }", l);
      }
      if (p >= l.size())
        fail(line_no, "unterminated labels", l);
      p++;
    }
    if (p >= l.size() || l[p] != ' ')
      fail(line_no, "expected one space before the value", l);
    const std::string v = l.substr(p + 1);
    if (v.find(' ') != std::string::npos)
      fail(line_no, "timestamps or extra fields are not emitted", l);
    if (!parse_value(v, &s.value))
      fail(line_no, "bad value", l);
    const std::string fam = family_of(e.families, s.name);
    if (fam.empty() || e.families[fam].type.empty())
      fail(line_no, "sample before its TYPE", l);
    if (fam != current || closed.count(fam))
      fail(line_no, "samples of a family must follow its TYPE without interruption", l);
    std::string key = s.name;
    for (const auto &[k, val] : s.labels)
      key += "\x01" + k + "\x02" + val;
    if (!series_seen.insert(key).second)
      fail(line_no, "duplicate series", l);
    const std::string &type = e.families[fam].type;
    if ((type == "counter" ||
         (s.name.size() > 6 && s.name.compare(s.name.size() - 6, 6, "_count") == 0)) &&
        !(s.value >= 0))
      fail(line_no, "negative counter", l);
    e.families[fam].samples.push_back(std::move(s));
  }
  for (const auto &[name, f] : e.families) {
    if (f.type.empty())
      throw std::runtime_error(name + ": HELP without TYPE");
    if (f.type == "counter" && name.size() > 6 && name.compare(name.size() - 6, 6, "_total") != 0)
      throw std::runtime_error(name + ": counter name should end in _total");
    if (f.type == "histogram")
      check_histogram(name, f);
  }
  return e;
}

// ---- a strict JSON reader (RFC 8259, enough for /stats.json) ----

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double n = 0;
  std::string s;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  const Json &operator[](const std::string &k) const {
    auto it = fields.find(k);
    if (kind != Object || it == fields.end())
      throw std::runtime_error("no field " + k);
    return it->second;
  }
};

class JsonReader {
public:
  explicit JsonReader(const std::string &t) : t_(t) {}
  Json document() {
    Json v = value();
    if (p_ != t_.size())
      error("trailing bytes");
    return v;
  }

private:
  [[noreturn]] void error(const std::string &why) {
    throw std::runtime_error("JSON at " + std::to_string(p_) + ": " + why);
  }
  char peek() { return p_ < t_.size() ? t_[p_] : '\0'; }
  void expect(char c) {
    if (peek() != c)
      error(std::string("expected ") + c);
    p_++;
  }
  bool literal(const char *w) {
    const std::string word = w;
    if (t_.compare(p_, word.size(), word) != 0)
      return false;
    p_ += word.size();
    return true;
  }
  Json value() {
    Json v;
    const char c = peek();
    if (c == '{') {
      v.kind = Json::Object;
      p_++;
      while (peek() != '}') {
        if (!v.fields.empty())
          expect(',');
        std::string k = string();
        expect(':');
        if (!v.fields.emplace(k, value()).second)
          error("repeated key " + k);
      }
      p_++;
    } else if (c == '[') {
      v.kind = Json::Array;
      p_++;
      while (peek() != ']') {
        if (!v.items.empty())
          expect(',');
        v.items.push_back(value());
      }
      p_++;
    } else if (c == '"') {
      v.kind = Json::String;
      v.s = string();
    } else if (literal("null")) {
      v.kind = Json::Null;
    } else if (literal("true") || literal("false")) {
      v.kind = Json::Bool;
      v.b = t_[p_ - 1] == 'e' && t_[p_ - 2] == 'u';
    } else {
      v.kind = Json::Number;
      const size_t b = p_;
      if (peek() == '-')
        p_++;
      if (peek() == '0')
        p_++;
      else if (peek() >= '1' && peek() <= '9')
        while (isdigit(static_cast<unsigned char>(peek())))
          p_++;
      else
        error("bad value");
      if (peek() == '.') {
        p_++;
        if (!isdigit(static_cast<unsigned char>(peek())))
          error("bad fraction");
        while (isdigit(static_cast<unsigned char>(peek())))
          p_++;
      }
      if (peek() == 'e' || peek() == 'E') {
        p_++;
        if (peek() == '+' || peek() == '-')
          p_++;
        if (!isdigit(static_cast<unsigned char>(peek())))
          error("bad exponent");
        while (isdigit(static_cast<unsigned char>(peek())))
          p_++;
      }
      v.n = std::strtod(t_.substr(b, p_ - b).c_str(), nullptr);
    }
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (p_ >= t_.size())
        error("unterminated string");
      const auto c = static_cast<unsigned char>(t_[p_++]);
      if (c == '"')
        return out;
      if (c < 0x20)
        error("raw control character in a string");
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        continue;
      }
      const char e = t_[p_++];
      static const std::string kSimple = "\"\\/bfnrt", kValue = "\"\\/\b\f\n\r\t";
      if (auto i = kSimple.find(e); i != std::string::npos) {
        out.push_back(kValue[i]);
      } else if (e == 'u') {
        const unsigned cp = std::stoul(t_.substr(p_, 4), nullptr, 16);
        p_ += 4;
        if (cp >= 0x80)
          error("only ASCII \\u escapes expected here");
        out.push_back(static_cast<char>(cp));
      } else {
        error("bad escape");
      }
    }
  }

  const std::string &t_;
  size_t p_ = 0;
};

Json parse_json(const std::string &t) { return JsonReader(t).document(); }

// ---- fixtures ----

StreamFigures stream(const std::string &name, int64_t base) {
  StreamFigures f;
  f.name = name;
  f.subscribers = base + 1;
  f.emitted = base + 2;
  f.queued = base + 3;
  f.overflow_dropped = base + 4;
  f.failed = base + 5;
  f.bytes_queued = base + 6;
  f.newest_id = base + 7;
  f.horizon = base + 8;
  return f;
}

Snapshot sample_snapshot() {
  Snapshot s;
  s.now_us = 1700000000123456;
  s.worker = 2;
  s.connections = 17;
  s.queued = 1000;
  s.overflow_dropped = 3;
  s.catch_ups = 5;
  s.ring_overflows = 1;
  s.rows_read = 7;
  StreamFigures chat = stream("chat", 100);
  chat.has_latency = true;
  chat.latency_p50_ms = 0.512;
  chat.latency_p99_ms = 4.096;
  chat.latency_buckets[0] = 1;                   // [1, 2) us
  chat.latency_buckets[8] = 10;                  // [256, 512) us
  chat.latency_buckets[11] = 4;                  // [2048, 4096) us
  chat.latency_buckets[kLatencyBuckets - 1] = 2; // clamped: >= 2^25 us
  s.streams.push_back(chat);
  s.streams.push_back(stream("orders.eu-1", 200));
  return s;
}

using Labels = std::map<std::string, std::string>;

} // namespace

// ---- the parsers refuse what they should (so passing them means something) ----

TEST(PromParser, RejectsMalformedDocuments) {
  const char *bad[] = {
      "x 1\n",                                        // no TYPE
      "# TYPE x gauge\nx 1",                          // no final LF
      "# TYPE x gauge\nx{a=\"\\t\"} 1\n",             // bad escape
      "# TYPE x gauge\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n", // duplicate series
      "# TYPE x gauge\n# TYPE y gauge\ny 1\nx 1\n",   // x after y started
      "# TYPE x gauge\nx 1\n# HELP x late\n",         // HELP after samples
      "# TYPE x gauge\nx  1\n",                       // two spaces
      "# TYPE x gauge\nx 1 123\n",                    // timestamp
      "# TYPE x_total counter\nx_total -1\n",         // negative counter
      "# TYPE x gauge\n\nx 1\n",                      // empty line
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",    // no +Inf
      "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", // +Inf != count
      "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",          // no _sum
  };
  for (const char *doc : bad)
    EXPECT_THROW(parse_exposition(doc), std::runtime_error) << doc;
  EXPECT_NO_THROW(
      parse_exposition("# HELP h a histogram\n# TYPE h histogram\n"
                       "h_bucket{k=\"v\",le=\"0.5\"} 1\nh_bucket{k=\"v\",le=\"+Inf\"} 3\n"
                       "h_sum{k=\"v\"} 2.5\nh_count{k=\"v\"} 3\n"));
}

TEST(JsonParser, RejectsMalformedDocuments) {
  for (const char *doc : {"{", "{\"a\":1,}", "[1 2]", "{\"a\":01}", "\"a\nb\"", "{\"a\":1}x",
                          "{\"a\":1,\"a\":2}", "nan", "{\"a\":.5}"})
    EXPECT_THROW(parse_json(doc), std::runtime_error) << doc;
}

// ---- /metrics ----

TEST(Prometheus, EmptySnapshotIsValid) {
  Snapshot s;
  const auto e = parse_exposition(render_prometheus(s));
  EXPECT_EQ(e.value("pgbus_stream_up", {{"worker", "0"}}), 1);
  EXPECT_EQ(e.value("pgbus_stream_connections", {}), 0);
  EXPECT_TRUE(e.family("pgbus_stream_stream_queued_total").samples.empty());
  EXPECT_EQ(e.family("pgbus_stream_commit_latency_seconds").type, "histogram");
}

TEST(Prometheus, EveryFamilyHasHelpAndTheRightType) {
  const auto e = parse_exposition(render_prometheus(sample_snapshot()));
  const std::map<std::string, std::string> want = {
      {"pgbus_stream_up", "gauge"},
      {"pgbus_stream_connections", "gauge"},
      {"pgbus_stream_queued_total", "counter"},
      {"pgbus_stream_overflow_dropped_total", "counter"},
      {"pgbus_stream_catch_ups_total", "counter"},
      {"pgbus_stream_ring_overflows_total", "counter"},
      {"pgbus_stream_rows_read_total", "counter"},
      {"pgbus_stream_stream_subscribers", "gauge"},
      {"pgbus_stream_stream_emitted_total", "counter"},
      {"pgbus_stream_stream_queued_total", "counter"},
      {"pgbus_stream_stream_overflow_dropped_total", "counter"},
      {"pgbus_stream_stream_failed_total", "counter"},
      {"pgbus_stream_stream_bytes_queued_total", "counter"},
      {"pgbus_stream_stream_newest_id", "gauge"},
      {"pgbus_stream_stream_horizon", "gauge"},
      {"pgbus_stream_commit_latency_seconds", "histogram"},
      // 0.2.0's names, deprecated aliases for one version
      {"pgbus_stream_delivered_total", "counter"},
      {"pgbus_stream_dropped_total", "counter"},
      {"pgbus_stream_stream_delivered_total", "counter"},
      {"pgbus_stream_stream_bytes_sent_total", "counter"},
  };
  EXPECT_EQ(e.families.size(), want.size());
  for (const auto &[name, type] : want) {
    EXPECT_EQ(e.family(name).type, type) << name;
    EXPECT_FALSE(e.family(name).help.empty()) << name;
  }
  EXPECT_NE(e.family("pgbus_stream_commit_latency_seconds").help.find("approximate"),
            std::string::npos);
}

TEST(Prometheus, WorkerFigures) {
  const auto e = parse_exposition(render_prometheus(sample_snapshot()));
  const Labels w = {{"worker", "2"}};
  EXPECT_EQ(e.value("pgbus_stream_up", w), 1);
  EXPECT_EQ(e.value("pgbus_stream_connections", {}), 17);
  EXPECT_EQ(e.value("pgbus_stream_queued_total", w), 1000);
  EXPECT_EQ(e.value("pgbus_stream_overflow_dropped_total", w), 3);
  EXPECT_EQ(e.value("pgbus_stream_delivered_total", w), 1000); // deprecated aliases
  EXPECT_EQ(e.value("pgbus_stream_dropped_total", w), 3);
  EXPECT_EQ(e.value("pgbus_stream_catch_ups_total", w), 5);
  EXPECT_EQ(e.value("pgbus_stream_ring_overflows_total", w), 1);
  EXPECT_EQ(e.value("pgbus_stream_rows_read_total", w), 7);
}

TEST(Prometheus, UpIsZeroWhenTheDatabaseFails) {
  Snapshot s = sample_snapshot();
  s.database_ok = false;
  EXPECT_EQ(parse_exposition(render_prometheus(s)).value("pgbus_stream_up", {{"worker", "2"}}), 0);
}

TEST(Prometheus, StreamFigures) {
  const auto e = parse_exposition(render_prometheus(sample_snapshot()));
  for (const auto &[name, base] : std::map<std::string, int>{{"chat", 100}, {"orders.eu-1", 200}}) {
    const Labels l = {{"stream", name}};
    EXPECT_EQ(e.value("pgbus_stream_stream_subscribers", l), base + 1);
    EXPECT_EQ(e.value("pgbus_stream_stream_emitted_total", l), base + 2);
    EXPECT_EQ(e.value("pgbus_stream_stream_queued_total", l), base + 3);
    EXPECT_EQ(e.value("pgbus_stream_stream_overflow_dropped_total", l), base + 4);
    EXPECT_EQ(e.value("pgbus_stream_stream_failed_total", l), base + 5);
    EXPECT_EQ(e.value("pgbus_stream_stream_bytes_queued_total", l), base + 6);
    EXPECT_EQ(e.value("pgbus_stream_stream_delivered_total", l), base + 3); // deprecated aliases
    EXPECT_EQ(e.value("pgbus_stream_stream_bytes_sent_total", l), base + 6);
    EXPECT_EQ(e.value("pgbus_stream_stream_newest_id", l), base + 7);
    EXPECT_EQ(e.value("pgbus_stream_stream_horizon", l), base + 8);
  }
}

TEST(Prometheus, LatencyHistogram) {
  const auto e = parse_exposition(render_prometheus(sample_snapshot()));
  const Family &h = e.family("pgbus_stream_commit_latency_seconds");
  std::vector<std::pair<std::string, double>> chat;
  for (const Sample &s : h.samples)
    if (s.name == "pgbus_stream_commit_latency_seconds_bucket" && s.labels.at("stream") == "chat")
      chat.emplace_back(s.labels.at("le"), s.value);
  // le = 2^(b+1) us for every bucket but the last, which the recorder clamps
  // into (it holds everything slower) and so only counts toward +Inf.
  ASSERT_EQ(chat.size(), size_t(kLatencyBuckets));
  EXPECT_EQ(chat[0].first, "0.000002");
  EXPECT_EQ(chat[9].first, "0.001024");
  EXPECT_EQ(chat[kLatencyBuckets - 2].first, "33.554432");
  EXPECT_EQ(chat.back().first, "+Inf");
  for (int b = 0; b < kLatencyBuckets - 1; b++)
    EXPECT_DOUBLE_EQ(std::strtod(chat[b].first.c_str(), nullptr), std::ldexp(1.0, b + 1) / 1e6);
  EXPECT_EQ(chat[0].second, 1);
  EXPECT_EQ(chat[7].second, 1);
  EXPECT_EQ(chat[8].second, 11);
  EXPECT_EQ(chat[11].second, 15);
  EXPECT_EQ(chat[kLatencyBuckets - 2].second, 15);
  EXPECT_EQ(chat.back().second, 17);
  const Labels l = {{"stream", "chat"}};
  EXPECT_EQ(e.value("pgbus_stream_commit_latency_seconds_count", l), 17);
  const double sum_us = 1 * 1.5 + 10 * 384 + 4 * 3072 + 2 * 1.5 * std::ldexp(1.0, 25);
  EXPECT_NEAR(e.value("pgbus_stream_commit_latency_seconds_sum", l), sum_us / 1e6, 1e-12);
  // A stream without latencies still has a complete, empty histogram.
  const Labels o = {{"stream", "orders.eu-1"}};
  EXPECT_EQ(e.value("pgbus_stream_commit_latency_seconds_count", o), 0);
  EXPECT_EQ(e.value("pgbus_stream_commit_latency_seconds_sum", o), 0);
  EXPECT_EQ(e.value("pgbus_stream_commit_latency_seconds_bucket",
                    {{"stream", "orders.eu-1"}, {"le", "+Inf"}}),
            0);
}

TEST(Prometheus, LabelEscapingRoundTrips) {
  const std::vector<std::string> names = {"back\\slash",   "quo\"te", "new\nline",
                                          "\\n literally", "\\\"",    "\"\\\n\\\\",
                                          "trailing\\",    "{},= ",   "caf\xc3\xa9"};
  Snapshot s;
  for (size_t i = 0; i < names.size(); i++)
    s.streams.push_back(stream(names[i], int64_t(i) * 10));
  const std::string text = render_prometheus(s);
  const auto e = parse_exposition(text);
  for (size_t i = 0; i < names.size(); i++) {
    EXPECT_EQ(e.value("pgbus_stream_stream_queued_total", {{"stream", names[i]}}), i * 10 + 3)
        << names[i];
    EXPECT_EQ(e.value("pgbus_stream_commit_latency_seconds_count", {{"stream", names[i]}}), 0);
  }
  // Exactly the three escapes: nothing else is escaped.
  EXPECT_NE(text.find("stream=\"new\\nline\""), std::string::npos);
  EXPECT_NE(text.find("stream=\"{},= \""), std::string::npos);
  EXPECT_NE(text.find("stream=\"caf\xc3\xa9\""), std::string::npos);
}

TEST(Prometheus, InvalidUtf8InANameIsReplaced) {
  Snapshot s;
  s.streams.push_back(stream("a\xff"
                             "b\xc0\xaf",
                             0));
  const auto e = parse_exposition(render_prometheus(s));
  EXPECT_EQ(e.value("pgbus_stream_stream_emitted_total", {{"stream", "a\xef\xbf\xbd"
                                                                     "b\xef\xbf\xbd\xef\xbf\xbd"}}),
            2);
}

TEST(Prometheus, LargeCountersAreExact) {
  Snapshot s;
  s.queued = 18446744073709551615ull;
  s.streams.push_back(stream("big", (int64_t{1} << 53) + 1));
  const std::string text = render_prometheus(s);
  EXPECT_NE(text.find("pgbus_stream_queued_total{worker=\"0\"} 18446744073709551615\n"),
            std::string::npos);
  EXPECT_NE(text.find("pgbus_stream_stream_horizon{stream=\"big\"} 9007199254741001\n"),
            std::string::npos);
  EXPECT_NO_THROW(parse_exposition(text));
}

// ---- /stats.json ----

TEST(Json, AllFields) {
  const Json j = parse_json(render_json(sample_snapshot()));
  EXPECT_EQ(j["now_us"].n, 1700000000123456.0);
  EXPECT_EQ(j["worker"].n, 2);
  EXPECT_EQ(j["connections"].n, 17);
  EXPECT_EQ(j["database_ok"].kind, Json::Bool);
  EXPECT_TRUE(j["database_ok"].b);
  EXPECT_EQ(j["totals"]["queued"].n, 1000);
  EXPECT_EQ(j["totals"]["overflow_dropped"].n, 3);
  EXPECT_EQ(j["totals"]["catch_ups"].n, 5);
  EXPECT_EQ(j["totals"]["ring_overflows"].n, 1);
  EXPECT_EQ(j["totals"]["rows_read"].n, 7);
  ASSERT_EQ(j["streams"].items.size(), 2u);
  const Json &chat = j["streams"].items[0];
  EXPECT_EQ(chat["name"].s, "chat");
  const char *ints[] = {"subscribers", "emitted",      "queued",    "overflow_dropped",
                        "failed",      "bytes_queued", "newest_id", "horizon"};
  for (int i = 0; i < 8; i++)
    EXPECT_EQ(chat[ints[i]].n, 100 + i + 1) << ints[i];
  EXPECT_EQ(chat["latency_p50_ms"].n, 0.512);
  EXPECT_EQ(chat["latency_p99_ms"].n, 4.096);
  ASSERT_EQ(chat["latency_buckets"].items.size(), size_t(kLatencyBuckets));
  EXPECT_EQ(chat["latency_buckets"].items[8].n, 10);
  EXPECT_EQ(chat.fields.size(), 12u);
  // No latency in the window: percentiles are null, not 0.
  const Json &orders = j["streams"].items[1];
  EXPECT_EQ(orders["name"].s, "orders.eu-1");
  EXPECT_EQ(orders["latency_p50_ms"].kind, Json::Null);
  EXPECT_EQ(orders["latency_p99_ms"].kind, Json::Null);
}

TEST(Json, CompactAndEmpty) {
  Snapshot s;
  s.database_ok = false;
  const std::string text = render_json(s);
  EXPECT_EQ(text.find_first_of(" \n\t"), std::string::npos) << text;
  const Json j = parse_json(text);
  EXPECT_FALSE(j["database_ok"].b);
  EXPECT_EQ(j["streams"].kind, Json::Array);
  EXPECT_TRUE(j["streams"].items.empty());
}

TEST(Json, NamesAreEscaped) {
  Snapshot s;
  const std::string nasty = "q\"b\\n\nt\t\x01<\xff";
  s.streams.push_back(stream(nasty, 0));
  const Json j = parse_json(render_json(s));
  EXPECT_EQ(j["streams"].items[0]["name"].s, "q\"b\\n\nt\t\x01<\xef\xbf\xbd");
}

TEST(Json, NonFiniteLatencyIsNull) {
  Snapshot s;
  StreamFigures f = stream("x", 0);
  f.has_latency = true;
  f.latency_p50_ms = NAN;
  f.latency_p99_ms = INFINITY;
  s.streams.push_back(f);
  const Json j = parse_json(render_json(s));
  EXPECT_EQ(j["streams"].items[0]["latency_p50_ms"].kind, Json::Null);
  EXPECT_EQ(j["streams"].items[0]["latency_p99_ms"].kind, Json::Null);
}

// ---- the status page (src/http/status_page.cpp) ----

TEST(StatusPage, SelfContainedWithTheElementsTheBrowserTestReads) {
  const std::string &page = pgbs::http::status_page_html();
  EXPECT_EQ(page.compare(0, 15, "<!doctype html>"), 0);
  for (const char *needle :
       {"id=\"total-queued\"", "id=\"connections\"", "<canvas", "fetch(\"stats.json\"", "</html>"})
    EXPECT_NE(page.find(needle), std::string::npos) << needle;
  // No external assets: nothing is loaded from anywhere but /stats.json.
  for (const char *needle : {"http://", "https://", "\"//", "'//", " src=", "@import", "url("})
    EXPECT_EQ(page.find(needle), std::string::npos) << needle;
  // The one link is an empty inline icon (so the browser asks for no /favicon.ico).
  for (size_t at = page.find("href="); at != std::string::npos; at = page.find("href=", at + 1))
    EXPECT_EQ(page.compare(at, 13, "href=\"data:,\""), 0) << page.substr(at, 40);
  EXPECT_LT(page.size(), 16u * 1024);
  EXPECT_EQ(&page, &pgbs::http::status_page_html());
}
