// A standalone program that runs http::Server in its own epoll loop, the way
// the worker does, with fixed rules instead of PostgreSQL. Used by run.sh.
//
//   driver --port P [--heartbeat S] [--idle S] [--request-timeout S]
//          [--max-connections N] [--cors LIST] [--policy drop_oldest|drop_newest|disconnect]
//          [--queue-events N] [--queue-bytes N] [--frames N] [--interval-ms X]
//          [--flood-per-tick N] [--flood-size BYTES] [--drain-ms MS] [--bench-rate N]
//          [--memory-limit BYTES]
//
// Rules: stream "missing" -> 404; cursor (Last-Event-ID, ?since=) "bad" ->
// 400; stream "deny" -> 401; stream "undecided" is never decided; stream
// "quiet" opens and gets nothing; stream
// "flood" gets flood-per-tick frames of flood-size bytes every interval,
// forever; stream "bench" gets bench-rate events per second (spread over the
// ticks) stamped for bench/bin/sse_load ({"t":<epoch us>,"seq":n,...}), each
// encoded once and shared; any other stream gets `frames` numbered frames,
// one per interval.
// GET /healthz answers "ok".
//
// Commands on stdin, one per line:
//   push <stream> <text>   one frame to every connection on <stream>
//   stats                  one "conn ..." line per connection, then "stats end"
//   close <id> <reason>    Server::close
//   shutdown               Server::shutdown(drain-ms), then exit 0
// Output on stdout (line-buffered): "listening <port>", "pending <id> <streams>
// since=<..> last_event_id=<..> token=<..> origin=<..>", "closed <id> <reason>",
// "conn ...", "log <MHD message>".
#include "core/sse.hpp"
#include "http/server.hpp"
#include "settings/configs.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <vector>

using namespace pgbs;

namespace {

volatile sig_atomic_t got_term = 0;
void on_term(int) { got_term = 1; }

int64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

struct Sub {
  std::vector<std::string> streams;
  int sent = 0;
  http::Conn *conn = nullptr; // the server's handle, released when it closes
};

struct Options {
  // The settings' defaults, but drop_oldest: the driver's flood tests expect
  // a live-only queue unless --policy says otherwise.
  http::Config cfg = [] {
    http::Config c = settings::http_config(settings::Settings{});
    c.overflow_policy = OverflowPolicy::DropOldest;
    return c;
  }();
  int frames = 3;
  int interval_ms = 100;
  int flood_per_tick = 50;
  size_t flood_size = 4096;
  int drain_ms = 1000;
  long bench_rate = 0;
};

Options parse_args(int argc, char **argv) {
  Options o;
  o.cfg.listen_addresses = "127.0.0.1";
  o.cfg.heartbeat_interval_s = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char *v = argv[i + 1];
    if (k == "--port")
      o.cfg.port = atoi(v);
    else if (k == "--listen")
      o.cfg.listen_addresses = v;
    else if (k == "--heartbeat")
      o.cfg.heartbeat_interval_s = atoi(v);
    else if (k == "--idle")
      o.cfg.idle_timeout_s = atoi(v);
    else if (k == "--request-timeout")
      o.cfg.request_timeout_s = atoi(v);
    else if (k == "--max-connections")
      o.cfg.max_connections = atoi(v);
    else if (k == "--cors")
      o.cfg.cors_origins = v;
    else if (k == "--policy") {
      if (!parse_overflow_policy(v, &o.cfg.overflow_policy)) {
        fprintf(stderr, "bad policy %s\n", v);
        exit(2);
      }
    } else if (k == "--queue-events")
      o.cfg.queue_max_events = strtoull(v, nullptr, 10);
    else if (k == "--queue-bytes")
      o.cfg.queue_max_bytes = strtoull(v, nullptr, 10);
    else if (k == "--frames")
      o.frames = atoi(v);
    else if (k == "--interval-ms")
      o.interval_ms = atoi(v);
    else if (k == "--flood-per-tick")
      o.flood_per_tick = atoi(v);
    else if (k == "--flood-size")
      o.flood_size = strtoull(v, nullptr, 10);
    else if (k == "--drain-ms")
      o.drain_ms = atoi(v);
    else if (k == "--memory-limit")
      o.cfg.connection_memory_limit = strtoull(v, nullptr, 10);
    else if (k == "--bench-rate")
      o.bench_rate = atol(v);
    else {
      fprintf(stderr, "unknown option %s\n", k.c_str());
      exit(2);
    }
  }
  return o;
}

bool has(const std::vector<std::string> &v, const char *s) {
  for (const auto &x : v)
    if (x == s)
      return true;
  return false;
}

std::string join(const std::vector<std::string> &v) {
  std::string out;
  for (const auto &x : v)
    out += (out.empty() ? "" : ",") + x;
  return out;
}

OutFrame data_frame(const std::string &id, const std::string &data) {
  std::string body;
  sse::append_event(body, "", "", data);
  OutFrame f;
  if (!id.empty())
    f.head = "id: " + id + "\n";
  f.body = std::make_shared<const std::string>(std::move(body));
  return f;
}

class Driver {
public:
  explicit Driver(Options o) : o_(std::move(o)) {}

  int main() {
    std::string err;
    if (!server_.start(o_.cfg, &err)) {
      fprintf(stderr, "start: %s\n", err.c_str());
      return 1;
    }
    server_.set_handler("/healthz", [](std::string *body, std::string *) {
      *body = "ok\n";
      return 200;
    });
    printf("listening %d\n", server_.port());
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = 1;
    epoll_ctl(ep, EPOLL_CTL_ADD, server_.poll_fd(), &ev);
    ev.data.u32 = 2;
    epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
    next_tick_ = now_ms() + o_.interval_ms;
    while (!got_term && !quit_) {
      long timeout = server_.timeout_ms();
      const long to_tick = static_cast<long>(std::max<int64_t>(next_tick_ - now_ms(), 0));
      if (timeout < 0 || timeout > to_tick)
        timeout = to_tick;
      epoll_event evs[4];
      const int n = epoll_wait(ep, evs, 4, static_cast<int>(timeout));
      server_.tick();
      for (int i = 0; i < n; ++i)
        if (evs[i].data.u32 == 2)
          read_commands(ep);
      server_.run();
      after_run();
      if (now_ms() >= next_tick_) {
        tick();
        next_tick_ = now_ms() + o_.interval_ms;
      }
      server_.run();
      after_run();
    }
    server_.shutdown(o_.drain_ms);
    after_run();
    printf("stopped\n");
    close(ep);
    return 0;
  }

private:
  void after_run() {
    for (auto &[id, reason] : server_.take_closed()) {
      printf("closed %llu %s\n", static_cast<unsigned long long>(id), reason.c_str());
      auto it = subs_.find(id);
      if (it != subs_.end()) {
        server_.release(it->second.conn);
        subs_.erase(it);
      }
    }
    for (http::Request &r : server_.take_pending())
      decide(r);
    for (const std::string &line : server_.take_log())
      printf("log %s\n", line.c_str());
  }

  void decide(const http::Request &r) {
    printf("pending %llu %s signed=%s since=%s last_event_id=%s replay=%s subscriber=%s "
           "token=%s origin=%s remote=%s\n",
           static_cast<unsigned long long>(r.conn_id), join(r.streams).c_str(),
           r.creds.signed_name.c_str(), r.has_since ? r.since.c_str() : "-",
           r.has_last_event_id ? r.last_event_id.c_str() : "-", r.replay.c_str(),
           r.subscriber.c_str(), r.creds.token.c_str(), r.origin.c_str(), r.remote_addr.c_str());
    if (has(r.streams, "undecided"))
      return;
    if (has(r.streams, "missing"))
      return server_.reject(r.conn_id, 404, "unknown stream: missing\n");
    if (has(r.streams, "deny"))
      return server_.reject(r.conn_id, 401, "token required");
    const std::string &cursor = r.has_last_event_id ? r.last_event_id : r.since;
    if ((r.has_last_event_id || r.has_since) && cursor == "bad")
      return server_.reject(r.conn_id, 400, "invalid cursor: bad\n");
    std::string pre;
    sse::append_retry(pre, o_.cfg.retry_ms);
    pre.pop_back();
    pre += ": pgbus stream open since_id=" + (cursor.empty() ? std::string("0") : cursor) +
           " stream=" + join(r.streams) + "\n";
    char hex[32];
    snprintf(hex, sizeof(hex), "%llx", static_cast<unsigned long long>(r.conn_id));
    sse::append_event(pre, "", "pgbus:connected",
                      std::string("{\"connectionId\":\"") + hex + "\"}");
    if (http::Conn *c = server_.open(r.conn_id, std::move(pre), ""))
      subs_[r.conn_id] = Sub{r.streams, 0, c};
  }

  void tick() {
    std::vector<OutFrame> bench = bench_frames();
    std::shared_ptr<const std::string> flood;
    for (auto &[id, s] : subs_) {
      if (has(s.streams, "bench")) {
        for (const OutFrame &f : bench)
          server_.push(s.conn, f);
        continue;
      }
      if (has(s.streams, "quiet"))
        continue;
      if (has(s.streams, "flood")) {
        if (!flood) {
          std::string body;
          sse::append_event(body, "", "", std::string(o_.flood_size, 'x'));
          flood = std::make_shared<const std::string>(std::move(body));
        }
        for (int k = 0; k < o_.flood_per_tick; ++k) {
          OutFrame f;
          f.head = "id: " + std::to_string(++s.sent) + "\n";
          f.body = flood;
          server_.push(s.conn, std::move(f));
        }
        continue;
      }
      if (s.sent < o_.frames) {
        ++s.sent;
        server_.push(s.conn, data_frame(std::to_string(s.sent), "frame " + std::to_string(s.sent)));
      }
    }
  }

  // The events due on stream "bench" since the last tick.
  std::vector<OutFrame> bench_frames() {
    std::vector<OutFrame> out;
    if (o_.bench_rate <= 0)
      return out;
    const int64_t now = now_ms();
    if (bench_start_ == 0)
      bench_start_ = now;
    const long long due = (now - bench_start_) * o_.bench_rate / 1000;
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const long long t_us = static_cast<long long>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
    for (; bench_seq_ < due; ++bench_seq_) {
      const std::string data = "{\"t\":" + std::to_string(t_us) +
                               ",\"seq\":" + std::to_string(bench_seq_ + 1) +
                               ",\"p\":0,\"s\":\"bench\"}";
      out.push_back(data_frame(std::to_string(bench_seq_ + 1), data));
    }
    return out;
  }

  void read_commands(int ep) {
    char buf[4096];
    const ssize_t n = read(0, buf, sizeof(buf));
    if (n <= 0) {
      epoll_ctl(ep, EPOLL_CTL_DEL, 0, nullptr); // stdin closed: keep serving
      return;
    }
    input_.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = input_.find('\n')) != std::string::npos) {
      const std::string line = input_.substr(0, nl);
      input_.erase(0, nl + 1);
      command(line);
    }
  }

  void command(const std::string &line) {
    // "<cmd> [<arg1> [<rest of the line>]]"
    std::string cmd, arg1, rest;
    const size_t s1 = line.find(' ');
    cmd = line.substr(0, s1);
    if (s1 != std::string::npos) {
      const size_t s2 = line.find(' ', s1 + 1);
      arg1 = line.substr(s1 + 1, s2 == std::string::npos ? std::string::npos : s2 - s1 - 1);
      if (s2 != std::string::npos)
        rest = line.substr(s2 + 1);
    }
    if (cmd == "push") {
      for (auto &[id, s] : subs_)
        if (has(s.streams, arg1.c_str()))
          server_.push(s.conn, data_frame("", rest));
    } else if (cmd == "stats") {
      for (const http::ConnectionInfo &c : server_.connections())
        printf(
            "conn %llu %s queued_events=%zu queued_bytes=%zu written=%llu overflow_dropped=%llu\n",
            static_cast<unsigned long long>(c.conn_id), c.remote_addr.c_str(), c.queued_events,
            c.queued_bytes, static_cast<unsigned long long>(c.written),
            static_cast<unsigned long long>(c.overflow_dropped));
      printf("stats end count=%zu\n", server_.connection_count());
    } else if (cmd == "close") {
      auto it = subs_.find(strtoull(arg1.c_str(), nullptr, 10));
      if (it != subs_.end())
        server_.close(it->second.conn, rest);
    } else if (cmd == "shutdown") {
      quit_ = true;
    }
  }

  Options o_;
  http::Server server_;
  std::map<uint64_t, Sub> subs_;
  std::string input_;
  int64_t next_tick_ = 0;
  int64_t bench_start_ = 0;
  long long bench_seq_ = 0;
  bool quit_ = false;
};

} // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  Driver d(parse_args(argc, argv));
  return d.main();
}
