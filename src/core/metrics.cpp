// Renders a worker's figures for /metrics (Prometheus text format 0.0.4) and
// /stats.json (the status page). Pure string building: no PostgreSQL, no I/O.
#include "core/metrics.hpp"
#include "core/sse.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace pgbs::metrics {

namespace {

// The length of the UTF-8 sequence that starts with `lead`, 0 if none does.
size_t utf8_length(unsigned char lead) {
  if (lead < 0x80)
    return 1;
  if ((lead >> 5) == 0x6)
    return 2;
  if ((lead >> 4) == 0xe)
    return 3;
  if ((lead >> 3) == 0x1e)
    return 4;
  return 0;
}

// Replaces every byte sequence that is not valid UTF-8 by U+FFFD, because
// both output formats must be UTF-8 (stream names are ASCII today; this only
// keeps a bad name from breaking the whole document).
std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = utf8_length(c);
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; k++)
      ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok && len > 1) {
      // Reject overlong forms, surrogates and code points above U+10FFFF.
      uint32_t cp = c & (0xff >> (len + 1));
      for (size_t k = 1; k < len; k++)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
      static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[len] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xef\xbf\xbd");
      i++;
    }
  }
  return out;
}

// Label values escape backslash, double quote and line feed (and nothing else).
std::string label_escape(std::string_view s) {
  std::string out;
  for (char ch : valid_utf8(s)) {
    if (ch == '\\')
      out.append("\\\\");
    else if (ch == '"')
      out.append("\\\"");
    else if (ch == '\n')
      out.append("\\n");
    else
      out.push_back(ch);
  }
  return out;
}

// The shortest decimal form that reads back as the same double; NaN and
// infinities as Prometheus spells them.
std::string format_double(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  for (int precision = 1; precision <= 17; precision++) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

// An exact decimal number of seconds for a whole number of microseconds
// ("0.000512", "33.554432"), so that le labels are readable and exact.
std::string micros_as_seconds(uint64_t us) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%" PRIu64 ".%06" PRIu64, us / 1000000, us % 1000000);
  std::string s = buf;
  while (s.back() == '0')
    s.pop_back();
  if (s.back() == '.')
    s.pop_back();
  return s;
}

// The bucket index recorders clamp into: it also holds everything slower, so
// it has no finite upper bound and only counts toward le="+Inf".
constexpr int kOpenBucket = kLatencyBuckets - 1;

// Upper bound of bucket b in microseconds.
uint64_t bucket_upper_us(int b) { return uint64_t{1} << (b + 1); }

// Approximate sum of the recorded latencies in seconds: each observation
// counts as the midpoint of its bucket, 1.5 * 2^b microseconds.
double approx_sum_seconds(const uint64_t (&buckets)[kLatencyBuckets]) {
  double sum_us = 0;
  for (int b = 0; b < kLatencyBuckets; b++)
    sum_us += static_cast<double>(buckets[b]) * 1.5 * static_cast<double>(uint64_t{1} << b);
  return sum_us / 1e6;
}

class PromWriter {
public:
  explicit PromWriter(std::string *out) : out_(out) {}

  // Starts a metric family; every sample of it must follow before the next.
  void family(std::string_view name, std::string_view type, std::string_view help) {
    name_ = name;
    out_->append("# HELP ").append(name).append(" ").append(help).append("\n");
    out_->append("# TYPE ").append(name).append(" ").append(type).append("\n");
  }

  // One sample of the current family; `suffix` is "_bucket", "_sum"... and
  // `labels` is the already-escaped inside of {...} (may be empty).
  void sample(std::string_view suffix, const std::string &labels, const std::string &value) {
    out_->append(name_).append(suffix);
    if (!labels.empty())
      out_->append("{").append(labels).append("}");
    out_->append(" ").append(value).append("\n");
  }

private:
  std::string *out_;
  std::string name_;
};

std::string label(std::string_view key, std::string_view value) {
  return std::string(key) + "=\"" + label_escape(value) + "\"";
}

std::string int_value(int64_t v) { return std::to_string(v); }
std::string uint_value(uint64_t v) { return std::to_string(v); }

// One per-stream family with an integer sample per stream.
template <typename Field>
void stream_family(PromWriter &w, const Snapshot &s, std::string_view name, std::string_view type,
                   std::string_view help, Field field) {
  w.family(name, type, help);
  for (const StreamFigures &f : s.streams)
    w.sample("", label("stream", f.name), int_value(field(f)));
}

void latency_histogram(PromWriter &w, const Snapshot &s) {
  w.family("pgbus_stream_commit_latency_seconds", "histogram",
           "Commit-to-queued latency of each stream's events since the worker started (one "
           "sample per event and worker); _sum is approximate, from bucket midpoints.");
  for (const StreamFigures &f : s.streams) {
    const std::string stream = label("stream", f.name);
    uint64_t cumulative = 0;
    for (int b = 0; b < kOpenBucket; b++) {
      cumulative += f.latency_buckets[b];
      w.sample("_bucket", stream + "," + label("le", micros_as_seconds(bucket_upper_us(b))),
               uint_value(cumulative));
    }
    cumulative += f.latency_buckets[kOpenBucket];
    w.sample("_bucket", stream + "," + label("le", "+Inf"), uint_value(cumulative));
    w.sample("_sum", stream, format_double(approx_sum_seconds(f.latency_buckets)));
    w.sample("_count", stream, uint_value(cumulative));
  }
}

void json_key(std::string &out, std::string_view key) {
  out.append("\"").append(key).append("\":");
}

void json_string(std::string &out, std::string_view s) {
  out.append("\"").append(sse::json_escape(valid_utf8(s))).append("\"");
}

// A JSON number, or null when it has none (NaN, infinities).
void json_double(std::string &out, double v) {
  out.append(std::isfinite(v) ? format_double(v) : "null");
}

void json_stream(std::string &out, const StreamFigures &f) {
  out.append("{");
  json_key(out, "name");
  json_string(out, f.name);
  const std::pair<const char *, int64_t> ints[] = {
      {"subscribers", f.subscribers}, {"emitted", f.emitted},
      {"queued", f.queued},           {"overflow_dropped", f.overflow_dropped},
      {"failed", f.failed},           {"bytes_queued", f.bytes_queued},
      {"newest_id", f.newest_id},     {"horizon", f.horizon}};
  for (const auto &[key, value] : ints) {
    out.append(",");
    json_key(out, key);
    out.append(int_value(value));
  }
  out.append(",");
  json_key(out, "latency_p50_ms");
  json_double(out, f.has_latency ? f.latency_p50_ms : NAN);
  out.append(",");
  json_key(out, "latency_p99_ms");
  json_double(out, f.has_latency ? f.latency_p99_ms : NAN);
  out.append(",");
  json_key(out, "latency_buckets");
  out.append("[");
  for (int b = 0; b < kLatencyBuckets; b++)
    out.append(b ? "," : "").append(uint_value(f.latency_buckets[b]));
  out.append("]}");
}

} // namespace

std::string render_prometheus(const Snapshot &s) {
  std::string out;
  out.reserve(2048 + s.streams.size() * 3072);
  PromWriter w(&out);
  const std::string worker = label("worker", std::to_string(s.worker));

  w.family("pgbus_stream_up", "gauge",
           "1 if this worker's last round of database reads worked, else 0.");
  w.sample("", worker, s.database_ok ? "1" : "0");
  w.family("pgbus_stream_connections", "gauge", "Open SSE connections, all workers.");
  w.sample("", "", int_value(s.connections));

  struct Counter {
    const char *name, *help;
    uint64_t value;
  };
  const Counter worker_counters[] = {
      {"pgbus_stream_queued_total", "Frames this worker put on connections' queues.", s.queued},
      {"pgbus_stream_overflow_dropped_total",
       "Frames this worker dropped from connections' queues (overflow policy).",
       s.overflow_dropped},
      {"pgbus_stream_catch_ups_total",
       "Times this worker fell behind the ring and caught up from the queue tables.", s.catch_ups},
      {"pgbus_stream_ring_overflows_total",
       "Times the shared ring overflowed (the workers then read from the tables).",
       s.ring_overflows},
      {"pgbus_stream_rows_read_total",
       "Rows this worker read from the queue tables (payloads too large for the ring, replays, "
       "lagging connections).",
       s.rows_read},
      {"pgbus_stream_delivered_total",
       "Deprecated alias of pgbus_stream_queued_total (0.2.0's name; removed in the next version).",
       s.queued},
      {"pgbus_stream_dropped_total",
       "Deprecated alias of pgbus_stream_overflow_dropped_total (0.2.0's name; removed in the next "
       "version).",
       s.overflow_dropped}};
  for (const Counter &c : worker_counters) {
    w.family(c.name, "counter", c.help);
    w.sample("", worker, uint_value(c.value));
  }

  stream_family(w, s, "pgbus_stream_stream_subscribers", "gauge",
                "Connections subscribed to the stream, all workers.",
                [](const StreamFigures &f) { return f.subscribers; });
  stream_family(w, s, "pgbus_stream_stream_emitted_total", "counter",
                "Committed events of the stream.",
                [](const StreamFigures &f) { return f.emitted; });
  stream_family(w, s, "pgbus_stream_stream_queued_total", "counter",
                "Frames of the stream put on connections' queues, all workers.",
                [](const StreamFigures &f) { return f.queued; });
  stream_family(w, s, "pgbus_stream_stream_overflow_dropped_total", "counter",
                "Frames of the stream dropped by the overflow policy, all workers.",
                [](const StreamFigures &f) { return f.overflow_dropped; });
  stream_family(w, s, "pgbus_stream_stream_failed_total", "counter",
                "Frames of the stream that could not be delivered, all workers.",
                [](const StreamFigures &f) { return f.failed; });
  stream_family(w, s, "pgbus_stream_stream_bytes_queued_total", "counter",
                "Bytes of the stream's frames put on connections' queues, all workers.",
                [](const StreamFigures &f) { return f.bytes_queued; });
  stream_family(w, s, "pgbus_stream_stream_newest_id", "gauge",
                "Highest committed msg_id of the stream.",
                [](const StreamFigures &f) { return f.newest_id; });
  stream_family(w, s, "pgbus_stream_stream_horizon", "gauge",
                "This worker's horizon for the stream (every msg_id up to it is settled).",
                [](const StreamFigures &f) { return f.horizon; });
  latency_histogram(w, s);
  stream_family(
      w, s, "pgbus_stream_stream_delivered_total", "counter",
      "Deprecated alias of pgbus_stream_stream_queued_total (0.2.0's name; removed in the "
      "next version).",
      [](const StreamFigures &f) { return f.queued; });
  stream_family(w, s, "pgbus_stream_stream_bytes_sent_total", "counter",
                "Deprecated alias of pgbus_stream_stream_bytes_queued_total (0.2.0's name; removed "
                "in the next version).",
                [](const StreamFigures &f) { return f.bytes_queued; });
  return out;
}

std::string render_json(const Snapshot &s) {
  std::string out;
  out.reserve(256 + s.streams.size() * 512);
  auto field = [&out](const char *key, const std::string &value, bool last = false) {
    json_key(out, key);
    out.append(value).append(last ? "" : ",");
  };
  out.append("{");
  field("now_us", int_value(s.now_us));
  field("worker", std::to_string(s.worker));
  field("database_ok", s.database_ok ? "true" : "false");
  field("connections", int_value(s.connections));
  json_key(out, "totals");
  out.append("{");
  field("queued", uint_value(s.queued));
  field("overflow_dropped", uint_value(s.overflow_dropped));
  field("catch_ups", uint_value(s.catch_ups));
  field("ring_overflows", uint_value(s.ring_overflows));
  field("rows_read", uint_value(s.rows_read), true);
  out.append("},");
  json_key(out, "streams");
  out.append("[");
  for (size_t i = 0; i < s.streams.size(); i++) {
    if (i)
      out.append(",");
    json_stream(out, s.streams[i]);
  }
  out.append("]}");
  return out;
}

} // namespace pgbs::metrics
