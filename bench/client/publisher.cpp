// publisher: publishes stamped messages at a fixed rate (absolute deadlines)
// or as fast as possible (--rate 0) to one of the systems under test.
//
// Targets:
//   pgbus   SELECT pgbus_stream.broadcast($1, $2)   ($1 stream name, $2 data), autocommit
//   notify  SELECT pg_notify($1, $2)                 ($1 channel = stream name)
//   sql     any statement given with --sql, same two parameters
//   nchan   HTTP POST <pub-path> with the data as body (keep-alive, raw socket)
//
// Every message is its own transaction / request. The data is one JSON object
//     {"t":<unix epoch us, taken just before the call>,"seq":<n>,"p":<publisher>,"s":<stream index>}
// (plus "pad" when --pad is given). seq starts at 1 and increases by one per
// (publisher connection p, stream s) for every *successful* call, so a client
// subscribed to stream s must see, from each p, 1,2,3,... with no gap.
// With --streams S > 1 message k of a publisher goes to stream k % S, named
// <stream-prefix><index>.
//
// At the end a JSON summary goes to stdout, and --expect-out FILE receives
// "P S" then P lines of S counts (the last seq sent per publisher and stream)
// for sse_load --expect-file.

#include "common.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libpq-fe.h>

using namespace bench;

namespace {

struct Opts {
    std::string target = "pgbus";
    std::string conninfo = "dbname=postgres";
    std::string sql;
    std::string session_sql;
    std::string host = "127.0.0.1";
    int port = 80;
    std::string pub_path = "/pub/{s}";
    std::string stream = "bench";
    std::string stream_prefix = "bench_";
    int streams = 1;
    double rate = 1000;
    double duration = 10;
    int conns = 1;
    int pad = 0;
    long long max_msgs = 50000000;
    std::string expect_out;
    std::string label;
};

void usage() {
    fprintf(stderr,
            "usage: publisher --target pgbus|notify|sql|nchan [options]\n"
            "  --conninfo STR        libpq connection string (pgbus, notify, sql)\n"
            "  --sql STR             statement for --target sql ($1 stream, $2 data)\n"
            "  --session-sql STR     run once per connection after connecting\n"
            "  --host H --port P     nchan server (default 127.0.0.1:80)\n"
            "  --pub-path P          nchan publisher path, {s} -> stream name (default /pub/{s})\n"
            "  --stream NAME         stream / channel name when --streams 1 (default bench)\n"
            "  --streams S           publish round-robin to S streams <stream-prefix><i>\n"
            "  --stream-prefix P     default bench_\n"
            "  --rate R              total messages/s over all connections; 0 = as fast as possible\n"
            "  --duration S          seconds to publish (default 10)\n"
            "  --conns P             publisher connections / threads (default 1, max 8)\n"
            "  --pad N               add N bytes of padding to each message\n"
            "  --max-msgs M          hard cap on messages per connection (default 50000000)\n"
            "  --expect-out FILE     write per-publisher, per-stream last seq for sse_load\n"
            "  --label L\n");
}

Opts parse_opts(int argc, char** argv) {
    Opts o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto need = [&](void) -> const char* {
            if (i + 1 >= argc) die("missing value for %s", a.c_str());
            return argv[++i];
        };
        if (a == "--target") o.target = need();
        else if (a == "--conninfo") o.conninfo = need();
        else if (a == "--sql") o.sql = need();
        else if (a == "--session-sql") o.session_sql = need();
        else if (a == "--host") o.host = need();
        else if (a == "--port") o.port = int(parse_ll("--port", need()));
        else if (a == "--pub-path") o.pub_path = need();
        else if (a == "--stream") o.stream = need();
        else if (a == "--streams") o.streams = int(parse_ll("--streams", need()));
        else if (a == "--stream-prefix") o.stream_prefix = need();
        else if (a == "--rate") o.rate = parse_double("--rate", need());
        else if (a == "--duration") o.duration = parse_double("--duration", need());
        else if (a == "--conns") o.conns = int(parse_ll("--conns", need()));
        else if (a == "--pad") o.pad = int(parse_ll("--pad", need()));
        else if (a == "--max-msgs") o.max_msgs = parse_ll("--max-msgs", need());
        else if (a == "--expect-out") o.expect_out = need();
        else if (a == "--label") o.label = need();
        else if (a == "-h" || a == "--help") { usage(); exit(0); }
        else { usage(); die("unknown option %s", a.c_str()); }
    }
    if (o.target == "pgbus" && o.sql.empty()) o.sql = "SELECT pgbus_stream.broadcast($1, $2)";
    else if (o.target == "notify" && o.sql.empty()) o.sql = "SELECT pg_notify($1, $2)";
    else if (o.target == "sql" && o.sql.empty()) die("--target sql needs --sql");
    else if (o.target != "pgbus" && o.target != "notify" && o.target != "sql" && o.target != "nchan")
        die("unknown --target %s", o.target.c_str());
    if (o.conns < 1 || o.conns > 8) die("--conns must be 1..8 (sse_load tracks 8 publishers)");
    if (o.streams < 1 || o.streams > 1000000) die("--streams out of range");
    if (o.rate < 0) die("--rate must be >= 0");
    if (o.duration <= 0 || o.duration > 3600) die("--duration must be in (0, 3600]");
    if (o.pad < 0 || o.pad > 1000000) die("--pad out of range");
    return o;
}

// ---- minimal HTTP/1.1 client for the nchan publisher -------------------------

class HttpPost {
public:
    HttpPost(std::string host, int port) : host_(std::move(host)), port_(port) {}
    ~HttpPost() { if (fd_ >= 0) close(fd_); }

    bool connect_now(std::string& err) {
        if (fd_ >= 0) { close(fd_); fd_ = -1; }
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) { err = strerror(errno); return false; }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct timeval tv{10, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(port_));
        if (inet_pton(AF_INET, host_.c_str(), &a.sin_addr) != 1) { close(fd); err = "bad host " + host_; return false; }
        if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            err = std::string("connect: ") + strerror(errno);
            close(fd);
            return false;
        }
        fd_ = fd;
        buf_.clear();
        return true;
    }

    // Returns the HTTP status, or -1 with err set.
    int post(const std::string& path, const std::string& body, std::string& err) {
        for (int attempt = 0; attempt < 2; ++attempt) {
            if (fd_ < 0 && !connect_now(err)) return -1;
            std::string req = "POST " + path + " HTTP/1.1\r\nHost: " + host_ + ":" + std::to_string(port_) +
                              "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\n\r\n" + body;
            if (!send_all(req)) {
                close(fd_); fd_ = -1;
                err = std::string("send: ") + strerror(errno);
                continue;   // the server may have closed an idle keep-alive connection
            }
            int st = read_response(err);
            if (st < 0) { close(fd_); fd_ = -1; if (attempt == 0 && err == "eof") continue; return -1; }
            return st;
        }
        return -1;
    }

private:
    std::string host_;
    int port_;
    int fd_ = -1;
    std::string buf_;
    bool close_after_ = false;

    bool send_all(const std::string& s) {
        size_t off = 0;
        while (off < s.size()) {
            ssize_t w = send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (w < 0) { if (errno == EINTR) continue; return false; }
            off += size_t(w);
        }
        return true;
    }
    bool fill(std::string& err) {
        char b[16384];
        while (true) {
            ssize_t r = recv(fd_, b, sizeof b, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) { err = std::string("recv: ") + strerror(errno); return false; }
            if (r == 0) { err = "eof"; return false; }
            buf_.append(b, size_t(r));
            return true;
        }
    }
    int read_response(std::string& err) {
        size_t hend;
        while ((hend = buf_.find("\r\n\r\n")) == std::string::npos) {
            if (buf_.size() > 65536) { err = "response header too long"; return -1; }
            if (!fill(err)) return -1;
        }
        std::string head = buf_.substr(0, hend);
        buf_.erase(0, hend + 4);
        int status = 0;
        if (head.compare(0, 5, "HTTP/") != 0 || head.size() < 12 || sscanf(head.c_str() + 9, "%3d", &status) != 1) {
            err = "bad status line";
            return -1;
        }
        std::string lower = head;
        for (auto& c : lower) c = char(tolower(static_cast<unsigned char>(c)));
        close_after_ = lower.find("\nconnection: close") != std::string::npos;
        size_t cl = lower.find("\ncontent-length:");
        if (cl != std::string::npos) {
            size_t n = size_t(strtoull(lower.c_str() + cl + 16, nullptr, 10));
            while (buf_.size() < n) if (!fill(err)) return -1;
            buf_.erase(0, n);
        } else if (lower.find("\ntransfer-encoding: chunked") != std::string::npos) {
            while (true) {   // walk the chunks until the terminating zero-size chunk
                size_t eol;
                while ((eol = buf_.find("\r\n")) == std::string::npos) if (!fill(err)) return -1;
                size_t n = size_t(strtoull(buf_.c_str(), nullptr, 16));
                while (buf_.size() < eol + 2 + n + 2) if (!fill(err)) return -1;
                buf_.erase(0, eol + 2 + n + 2);
                if (n == 0) break;
            }
        } else if (status != 204 && status != 304 && !(status >= 100 && status < 200)) {
            close_after_ = true;   // body delimited by close: drop the connection
        }
        if (close_after_) { close(fd_); fd_ = -1; }
        return status;
    }
};

// ---- one publisher connection --------------------------------------------------

struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int connected = 0;
    bool failed = false;
    bool started = false;
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    int64_t hard_end_ns = 0;   // a paced run that falls behind stops here
};

struct Worker {
    int id = 0;
    const Opts* o = nullptr;
    Shared* sh = nullptr;
    std::vector<uint32_t> seq;
    uint64_t sent = 0, errors = 0, late = 0, abandoned = 0;
    int64_t max_lag_ns = 0;
    Histogram call_us;
    std::string first_error;
    bool setup_ok = false;
    struct rusage ru{};

    std::string stream_name(int s) const {
        if (o->streams == 1) return o->stream;
        return o->stream_prefix + std::to_string(s);
    }

    void note_error(const std::string& e) {
        ++errors;
        if (first_error.empty()) first_error = e;
    }

    void run() {
        PGconn* pg = nullptr;
        HttpPost* http = nullptr;
        std::string err;
        bool ok = true;
        if (o->target == "nchan") {
            http = new HttpPost(o->host, o->port);
            if (!http->connect_now(err)) { first_error = "nchan " + o->host + ":" + std::to_string(o->port) + ": " + err; ok = false; }
        } else {
            pg = PQconnectdb(o->conninfo.c_str());
            if (PQstatus(pg) != CONNECTION_OK) {
                first_error = std::string("connect: ") + PQerrorMessage(pg);
                ok = false;
            } else {
                if (!o->session_sql.empty()) {
                    PGresult* r = PQexec(pg, o->session_sql.c_str());
                    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
                        first_error = std::string("session sql: ") + PQerrorMessage(pg);
                        ok = false;
                    }
                    PQclear(r);
                }
                if (ok) {
                    PGresult* r = PQprepare(pg, "pub", o->sql.c_str(), 2, nullptr);
                    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                        first_error = std::string("prepare \"") + o->sql + "\": " + PQerrorMessage(pg);
                        ok = false;
                    }
                    PQclear(r);
                }
            }
        }
        setup_ok = ok;
        {
            std::unique_lock<std::mutex> lk(sh->mu);
            ++sh->connected;
            if (!ok) sh->failed = true;
            sh->cv.notify_all();
            sh->cv.wait(lk, [&] { return sh->started || sh->failed; });
        }
        if (ok && !sh->failed) loop(pg, http);
        if (pg) PQfinish(pg);
        delete http;
        getrusage(RUSAGE_THREAD, &ru);
    }

    void loop(PGconn* pg, HttpPost* http) {
        const int S = o->streams;
        seq.assign(size_t(S), 0);
        const int P = o->conns;
        const bool paced = o->rate > 0;
        const double interval_ns = paced ? 1e9 * double(P) / o->rate : 0;
        const int64_t offset = paced ? int64_t(interval_ns * double(id) / double(P)) : 0;
        std::string body;
        body.reserve(size_t(128 + o->pad));
        std::string padding(size_t(o->pad), 'x');
        int consecutive_errors = 0;
        for (long long k = 0; k < o->max_msgs; ++k) {
            int64_t now = mono_ns();
            if (paced) {
                int64_t due = sh->start_ns + offset + int64_t(double(k) * interval_ns);
                if (due >= sh->end_ns) break;
                if (now >= sh->hard_end_ns) {   // far behind schedule: stop, count what was not sent
                    abandoned = uint64_t(double(sh->end_ns - due) / interval_ns);
                    break;
                }
                if (now < due) {
                    struct timespec ts{time_t(due / 1000000000), long(due % 1000000000)};
                    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {}
                } else {
                    int64_t lag = now - due;
                    if (lag > max_lag_ns) max_lag_ns = lag;
                    if (lag > 1000000) ++late;
                }
            } else if (now >= sh->end_ns) {
                break;
            }
            int s = int(k % S);
            uint32_t next_seq = seq[size_t(s)] + 1;
            std::string name = stream_name(s);
            int64_t t = realtime_us();
            char head[128];
            snprintf(head, sizeof head, "{\"t\":%lld,\"seq\":%u,\"p\":%d,\"s\":%d", (long long)t, next_seq, id, s);
            body.assign(head);
            if (o->pad) { body += ",\"pad\":\""; body += padding; body += '"'; }
            body += '}';

            int64_t c0 = mono_ns();
            bool ok = false;
            if (pg) {
                const char* vals[2] = {name.c_str(), body.c_str()};
                PGresult* r = PQexecPrepared(pg, "pub", 2, vals, nullptr, nullptr, 0);
                ExecStatusType st = PQresultStatus(r);
                ok = st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK;
                if (!ok) note_error(PQerrorMessage(pg));
                PQclear(r);
                if (!ok && PQstatus(pg) != CONNECTION_OK) { first_error += " (connection lost)"; break; }
            } else {
                std::string path = o->pub_path;
                size_t pos = path.find("{s}");
                if (pos != std::string::npos) path.replace(pos, 3, name);
                std::string err;
                int st = http->post(path, body, err);
                ok = st >= 200 && st < 300;
                if (!ok) note_error(st < 0 ? err : "HTTP " + std::to_string(st));
            }
            call_us.record((mono_ns() - c0) / 1000);
            if (ok) {
                seq[size_t(s)] = next_seq;
                ++sent;
                consecutive_errors = 0;
            } else if (++consecutive_errors >= 100) {
                first_error += " (100 consecutive errors, giving up)";
                break;
            }
        }
    }
};

}  // namespace

int main(int argc, char** argv) {
    Opts o = parse_opts(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    if (!o.expect_out.empty()) unlink(o.expect_out.c_str());

    Shared sh;
    std::vector<Worker> ws(size_t(o.conns));
    std::vector<std::thread> th;
    for (int i = 0; i < o.conns; ++i) {
        ws[size_t(i)].id = i;
        ws[size_t(i)].o = &o;
        ws[size_t(i)].sh = &sh;
        ws[size_t(i)].seq.assign(size_t(o.streams), 0);
    }
    for (int i = 0; i < o.conns; ++i) th.emplace_back([&ws, i] { ws[size_t(i)].run(); });
    {
        std::unique_lock<std::mutex> lk(sh.mu);
        sh.cv.wait(lk, [&] { return sh.connected == o.conns; });
        if (!sh.failed) {
            sh.start_ns = mono_ns() + 20000000;   // 20 ms from now, same for all threads
            sh.end_ns = sh.start_ns + int64_t(o.duration * 1e9);
            sh.hard_end_ns = sh.end_ns + int64_t(std::max(5.0, o.duration) * 1e9);
            sh.started = true;
        }
        sh.cv.notify_all();
    }
    for (auto& t : th) t.join();
    int64_t wall_ns = mono_ns() - sh.start_ns;

    if (sh.failed) {
        for (auto& w : ws)
            if (!w.setup_ok) {
                fprintf(stderr, "publisher: target %s: %s\n", o.target.c_str(), w.first_error.c_str());
                break;
            }
        if (o.target == "pgbus")
            fprintf(stderr, "publisher: hint: is the pgbus_stream extension installed (make install), preloaded "
                            "(shared_preload_libraries) and created (CREATE EXTENSION pgbus_stream)?\n");
        return 2;
    }

    Histogram all;
    uint64_t sent = 0, errors = 0, late = 0, abandoned = 0;
    int64_t max_lag = 0;
    double cpu_user = 0, cpu_sys = 0;
    std::string first_error;
    for (auto& w : ws) {
        sent += w.sent;
        errors += w.errors;
        late += w.late;
        abandoned += w.abandoned;
        if (w.max_lag_ns > max_lag) max_lag = w.max_lag_ns;
        const auto& b = w.call_us.buckets();
        for (size_t i = 0; i < b.size(); ++i) all.add_bucket(int(i), b[i]);
        all.merge_meta(w.call_us.max(), 0);
        cpu_user += tv_s(w.ru.ru_utime);
        cpu_sys += tv_s(w.ru.ru_stime);
        if (first_error.empty()) first_error = w.first_error;
    }

    if (!o.expect_out.empty()) {
        std::string tmp = o.expect_out + ".tmp";
        FILE* f = fopen(tmp.c_str(), "w");
        if (f) {
            fprintf(f, "%d %d\n", o.conns, o.streams);
            for (auto& w : ws) {
                for (int s = 0; s < o.streams; ++s) fprintf(f, "%s%u", s ? " " : "", w.seq[size_t(s)]);
                fputc('\n', f);
            }
            fclose(f);
            rename(tmp.c_str(), o.expect_out.c_str());
        } else {
            fprintf(stderr, "publisher: cannot write %s: %s\n", tmp.c_str(), strerror(errno));
        }
    }

    double wall = double(wall_ns) / 1e9;
    Json j;
    j.open_obj();
    j.kv("tool", "publisher");
    if (!o.label.empty()) j.kv("label", o.label);
    j.kv("target", o.target);
    if (o.target != "nchan") j.kv("sql", o.sql);
    j.kvi("conns", o.conns);
    j.kvi("streams", o.streams);
    j.kvd("rate_target", o.rate, 1);
    j.kvd("duration_s", o.duration, 3);
    j.kvd("wall_s", wall, 3);
    j.kvu("sent", sent);
    j.kvu("errors", errors);
    j.kvd("rate_achieved", wall > 0 ? double(sent) / wall : 0, 1);
    j.kvu("late_sends", late);
    j.kvu("abandoned_behind_schedule", abandoned);
    j.kvd("max_lag_ms", double(max_lag) / 1e6, 3);
    j.histogram("call_latency_us", all);
    j.kvd("cpu_user_s", cpu_user, 3);
    j.kvd("cpu_sys_s", cpu_sys, 3);
    if (!first_error.empty()) j.kv("first_error", first_error);
    j.close_obj();
    printf("%s\n", j.out.c_str());
    if (sent == 0) {
        fprintf(stderr, "publisher: nothing was published: %s\n", first_error.c_str());
        return 3;
    }
    return 0;
}
