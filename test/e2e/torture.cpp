// torture: concurrent producers and reconnecting SSE subscribers against a
// real server. Checks that every committed broadcast reaches every subscriber
// exactly once, rolled-back ones never, and that the per-stream order agrees
// with commit order (a message whose COMMIT returned before another's INSERT
// began must arrive first). Exit 0 on success; prints a JSON summary.
//
// usage: torture --conninfo "..." --port N --stream S [--producers 8] [--messages 20000] [--crash-ok 1]
//                [--subscribers 4] [--rollback-pct 10] [--max-sleep-ms 3] [--reconnect-every 300]
//                [--timeout 120]
#include <libpq-fe.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

struct Options {
  std::string conninfo = "dbname=postgres";
  int port = 8080;
  std::string stream = "torture";
  int producers = 8, messages = 20000, subscribers = 4, rollback_pct = 10, max_sleep_ms = 3;
  int reconnect_every = 300, timeout_s = 120;
  bool tolerate_crash = false; // --crash-ok 1: producers reconnect after the server restarts
};

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Sent {
  int64_t insert_start_us, commit_done_us;
};

std::mutex g_mu;
std::unordered_map<std::string, Sent> g_committed; // key -> times
std::set<std::string> g_rolled_back;
std::set<std::string> g_uncertain; // the server went away before COMMIT answered
std::atomic<int> g_next{0};
std::atomic<bool> g_producers_done{false};

bool exec_ok(PGconn *c, const char *sql, std::string *val = nullptr) {
  PGresult *r = PQexec(c, sql);
  bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
  if (!ok)
    fprintf(stderr, "sql error: %s: %s", sql, PQerrorMessage(c));
  if (ok && val && PQntuples(r) > 0)
    *val = PQgetvalue(r, 0, 0);
  PQclear(r);
  return ok;
}

PGconn *connect_retry(const Options &o) {
  for (int attempt = 0; attempt < 300; attempt++) { // the server may be restarting after a crash
    PGconn *c = PQconnectdb(o.conninfo.c_str());
    if (PQstatus(c) == CONNECTION_OK)
      return c;
    PQfinish(c);
    usleep(100000);
  }
  return nullptr;
}

void producer(const Options &o, int index, std::atomic<bool> *failed) {
  PGconn *c = connect_retry(o);
  if (!c) {
    fprintf(stderr, "producer %d cannot connect\n", index);
    *failed = true;
    return;
  }
  std::mt19937 rng(1234 + index);
  int crash_failures = 0;
  for (;;) {
    int n = 1 + (int)(rng() % 5);
    int first = g_next.fetch_add(n);
    if (first >= o.messages)
      break;
    n = std::min(n, o.messages - first);
    bool rollback = (int)(rng() % 100) < o.rollback_pct;
    std::vector<std::string> keys;
    int64_t start = now_us();
    bool ok = exec_ok(c, "BEGIN");
    for (int k = 0; k < n && ok; k++) {
      std::string key = "m" + std::to_string(first + k);
      keys.push_back(key);
      std::string sql = "SELECT pgbus_stream.broadcast('" + o.stream + "', '" + key + "')";
      ok = exec_ok(c, sql.c_str());
      if (ok && o.max_sleep_ms > 0 && rng() % 2)
        usleep((useconds_t)(rng() % (o.max_sleep_ms * 1000)));
    }
    bool ended = ok && exec_ok(c, rollback ? "ROLLBACK" : "COMMIT");
    int64_t done = now_us();
    std::lock_guard<std::mutex> lk(g_mu);
    if (!ended) {
      // In a crash test a server restart fails statements (libpq may not yet
      // call the connection bad); a bounded number of such failures is expected.
      if (!o.tolerate_crash || ++crash_failures > 20) {
        *failed = true;
        break;
      }
      // Lost the server mid-transaction (a crash test): the outcome is unknown.
      for (auto &key : keys)
        g_uncertain.insert(key);
      PQfinish(c);
      c = connect_retry(o);
      if (!c) {
        *failed = true;
        return;
      }
      continue;
    }
    for (auto &key : keys) {
      if (rollback)
        g_rolled_back.insert(key);
      else
        g_committed[key] = Sent{start, done};
    }
  }
  PQfinish(c);
}

// One SSE subscriber that reconnects with its last id every so often.
struct Subscriber {
  std::vector<std::string> received; // keys in arrival order
  std::map<std::string, int> count;
  int reconnects = 0, gaps = 0;
  std::string error;
};

int connect_sse(int port, const std::string &path, const std::string &last_id) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n";
  if (!last_id.empty())
    req += "Last-Event-ID: " + last_id + "\r\n";
  req += "\r\n";
  if (write(fd, req.data(), req.size()) != (ssize_t)req.size()) {
    close(fd);
    return -1;
  }
  return fd;
}

void subscriber(const Options &o, int index, Subscriber *s, std::atomic<bool> *stop) {
  std::mt19937 rng(999 + index);
  std::string last_id;
  std::string path = "/streams/" + o.stream;
  while (!*stop) {
    int fd = connect_sse(o.port, path, last_id);
    if (fd < 0) {
      usleep(100000); // the worker may be restarting
      continue;
    }
    std::string buf, raw;
    bool headers_done = false, chunked = false;
    size_t chunk_left = 0;
    int budget = o.reconnect_every > 0 ? 1 + (int)(rng() % (2 * o.reconnect_every)) : INT32_MAX;
    std::string ev_id, ev_name, ev_data;
    bool have_data = false;
    bool open = true;
    while (open && !*stop && budget > 0) {
      pollfd p{fd, POLLIN, 0};
      int pr = poll(&p, 1, 200);
      if (pr <= 0)
        continue;
      char tmp[65536];
      ssize_t n = read(fd, tmp, sizeof(tmp));
      if (n <= 0) {
        open = false;
        break;
      }
      raw.append(tmp, (size_t)n);
      if (!headers_done) {
        size_t e = raw.find("\r\n\r\n");
        if (e == std::string::npos)
          continue;
        std::string head = raw.substr(0, e);
        for (auto &ch : head)
          ch = (char)tolower((unsigned char)ch);
        chunked = head.find("transfer-encoding: chunked") != std::string::npos;
        if (raw.compare(0, 12, "HTTP/1.1 200") != 0) {
          s->error = "status: " + raw.substr(0, raw.find("\r\n")) + " for Last-Event-ID " + last_id + " body: " +
                     raw.substr(e + 4, 200);
          close(fd);
          usleep(100000);
          open = false;
          break;
        }
        raw.erase(0, e + 4);
        headers_done = true;
      }
      // The body is chunked (HTTP/1.1): take the chunks' payload only.
      if (!chunked) {
        buf += raw;
        raw.clear();
      }
      while (chunked) {
        if (chunk_left == 0) {
          size_t crlf = raw.find("\r\n");
          if (crlf == std::string::npos)
            break;
          if (crlf == 0) { // the CRLF that ends a chunk's data
            raw.erase(0, 2);
            continue;
          }
          chunk_left = strtoull(raw.substr(0, crlf).c_str(), nullptr, 16);
          raw.erase(0, crlf + 2);
          if (chunk_left == 0) { // last chunk: the stream ended
            open = false;
            break;
          }
        }
        size_t take = std::min<size_t>(chunk_left, raw.size());
        if (take == 0)
          break;
        buf.append(raw, 0, take);
        raw.erase(0, take);
        chunk_left -= take;
      }
      size_t pos;
      while ((pos = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, pos);
        buf.erase(0, pos + 1);
        if (!line.empty() && line.back() == '\r')
          line.pop_back();
        if (line.empty()) {
          if (have_data && ev_name == "turbo-stream") {
            s->received.push_back(ev_data);
            s->count[ev_data]++;
            budget--;
          } else if (ev_name == "pgbus:gap-detected") {
            s->gaps++;
          }
          if (!ev_id.empty())
            last_id = ev_id;
          ev_id.clear();
          ev_name.clear();
          ev_data.clear();
          have_data = false;
        } else if (line.rfind("id: ", 0) == 0) {
          ev_id = line.substr(4);
        } else if (line.rfind("event: ", 0) == 0) {
          ev_name = line.substr(7);
        } else if (line.rfind("data: ", 0) == 0) {
          ev_data += (have_data ? "\n" : "") + line.substr(6);
          have_data = true;
        } else if (line.rfind("data:", 0) == 0) {
          have_data = true;
        }
      }
    }
    close(fd);
    if (!*stop)
      s->reconnects++;
  }
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--conninfo") o.conninfo = v;
    else if (k == "--port") o.port = atoi(v.c_str());
    else if (k == "--stream") o.stream = v;
    else if (k == "--producers") o.producers = atoi(v.c_str());
    else if (k == "--messages") o.messages = atoi(v.c_str());
    else if (k == "--subscribers") o.subscribers = atoi(v.c_str());
    else if (k == "--rollback-pct") o.rollback_pct = atoi(v.c_str());
    else if (k == "--max-sleep-ms") o.max_sleep_ms = atoi(v.c_str());
    else if (k == "--reconnect-every") o.reconnect_every = atoi(v.c_str());
    else if (k == "--timeout") o.timeout_s = atoi(v.c_str());
    else if (k == "--crash-ok") o.tolerate_crash = atoi(v.c_str()) != 0;
    else {
      fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::atomic<bool> stop{false}, failed{false};
  std::vector<Subscriber> subs((size_t)o.subscribers);
  std::vector<std::thread> sub_threads;
  for (int i = 0; i < o.subscribers; i++)
    sub_threads.emplace_back(subscriber, std::cref(o), i, &subs[(size_t)i], &stop);
  usleep(500000); // subscribers connect before the first commit: they must see everything
  std::vector<std::thread> producers;
  for (int i = 0; i < o.producers; i++)
    producers.emplace_back(producer, std::cref(o), i, &failed);
  for (auto &t : producers)
    t.join();
  int64_t deadline = now_us() + (int64_t)o.timeout_s * 1000000;
  // Wait until every subscriber has every committed message (or the deadline).
  for (;;) {
    bool all = true;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      for (auto &s : subs) {
        size_t have = 0;
        for (auto &kv : g_committed)
          have += s.count.count(kv.first) ? 1 : 0;
        if (have < g_committed.size())
          all = false;
      }
    }
    if (all || now_us() > deadline)
      break;
    usleep(200000);
  }
  usleep(300000); // let duplicates, if any, arrive
  stop = true;
  for (auto &t : sub_threads)
    t.join();

  int errors = 0;
  auto fail = [&](const std::string &m) {
    if (errors++ < 20)
      fprintf(stderr, "FAIL: %s\n", m.c_str());
  };
  if (failed)
    fail("a producer failed");
  for (size_t i = 0; i < subs.size(); i++) {
    Subscriber &s = subs[i];
    for (auto &kv : g_committed) {
      auto it = s.count.find(kv.first);
      if (it == s.count.end())
        fail("subscriber " + std::to_string(i) + " missed " + kv.first);
      else if (it->second != 1)
        fail("subscriber " + std::to_string(i) + " got " + kv.first + " " + std::to_string(it->second) + " times");
    }
    for (auto &kv : s.count)
      if (g_rolled_back.count(kv.first))
        fail("subscriber " + std::to_string(i) + " got rolled-back " + kv.first);
      else if (g_uncertain.count(kv.first)) {
        if (kv.second != 1)
          fail("subscriber " + std::to_string(i) + " got uncertain " + kv.first + " " +
               std::to_string(kv.second) + " times");
      } else if (!g_committed.count(kv.first))
        fail("subscriber " + std::to_string(i) + " got unknown " + kv.first);
    // Commit order: no message may arrive after one whose INSERT began after its COMMIT returned.
    std::vector<const Sent *> seq;
    std::vector<std::string> seq_keys;
    for (auto &k : s.received) {
      auto it = g_committed.find(k);
      if (it != g_committed.end()) {
        seq.push_back(&it->second);
        seq_keys.push_back(k);
      }
    }
    int64_t suffix_min = INT64_MAX;
    std::vector<int64_t> mins(seq.size() + 1, INT64_MAX);
    for (size_t j = seq.size(); j-- > 0;) {
      suffix_min = std::min(suffix_min, seq[j]->commit_done_us);
      mins[j] = suffix_min;
    }
    for (size_t j = 0; j + 1 < seq.size(); j++)
      if (seq[j]->insert_start_us > mins[j + 1]) {
        fail("subscriber " + std::to_string(i) + ": order differs from commit order at position " +
             std::to_string(j) + " (" + seq_keys[j] + " arrived before a message committed before it began)");
        break;
      }
    if (!s.error.empty())
      fprintf(stderr, "note: subscriber %zu last error: %s\n", i, s.error.c_str());
  }
  int reconnects = 0, gaps = 0;
  for (auto &s : subs) {
    reconnects += s.reconnects;
    gaps += s.gaps;
  }
  printf("{\"uncertain\":%zu,\"committed\":%zu,\"rolled_back\":%zu,\"subscribers\":%d,\"reconnects\":%d,\"gap_events\":%d,"
         "\"errors\":%d}\n",
         g_uncertain.size(), g_committed.size(), g_rolled_back.size(), o.subscribers, reconnects, gaps, errors);
  return errors == 0 ? 0 : 1;
}
