// sse_load: Server-Sent-Events load client (C++17, raw epoll, no libraries).
//
// Opens N SSE connections (HTTP/1.1 GET <path>) from a list of source
// addresses, ramps them with a bounded number of handshakes in flight, parses
// SSE frames incrementally (chunked or identity transfer encoding), and for
// every event whose data carries a publisher stamp computes the latency
// now - t and checks per-connection sequence continuity.
//
// Publisher stamp (written by bench/client/publisher.cpp), one JSON object:
//     {"t":<unix epoch microseconds>,"seq":<n>,"p":<publisher>,"s":<stream>,...}
// Keys may come in any order, with whitespace around ':' (jsonb output), or
// escaped inside a JSON string (\"t\":...). "seq" starts at 1 and increases by
// one per (publisher p, stream s); "p" defaults to 0 when absent.
//
// Timeline: ramp (connect all) -> READY (ready file written) -> warmup ->
// measurement window of --duration seconds -> end. Events during warmup count
// for sequence/loss checks but not for latency or deliveries/s. The run ends
// early when an expectation is known (--expect-seqs, or --expect-file once it
// appears) and every live connection has seen the last seq; after the expect
// file appears the client waits at most --drain seconds more.
//
// Loss: a seq above last+1 counts the hole as "missing_in_gaps" (lost: the
// stream went on without it); at the end, seqs after the last one seen up to
// the publisher's final seq count as "missing_tail" (not delivered in time:
// lost or still queued). A seq at or below the last one is a duplicate (or
// reordered) event.
//
// Result: one JSON object on stdout. See bench/README.md.

#include "common.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

using namespace bench;

namespace {

constexpr int kMaxPub = 8;             // publishers tracked per connection
constexpr size_t kMaxLine = 1 << 20;   // longest SSE line accepted
constexpr size_t kMaxHeader = 16384;

struct Opts {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string path = "/streams/bench";   // "{i}" is replaced by the stream index
    int streams = 1;                       // connection i uses stream i % streams
    int conns = 100;
    int procs = 1;
    std::vector<std::string> src_addrs{"127.0.0.1"};
    double duration = 10;
    double warmup = 1;
    double ramp_timeout = 60;
    double drain = 3;
    int ramp_batch = 256;                  // handshakes in flight at once
    long long expect_seqs = 0;
    std::string expect_file;
    std::string ready_file;
    std::string ready_event;               // e.g. pgbus:connected
    std::string per_conn_out;
    std::string label;
    bool quickack = false;                 // TCP_QUICKACK after every read
    double read_bps = -1;                  // slow reader: bytes/s per connection once up (<0: no limit)
    int rcvbuf = 0;                        // SO_RCVBUF set before connect (0: kernel default)
    double close_rate = 0;                 // at the end, connections closed per second (0: all at once)
};

void usage() {
    fprintf(stderr,
            "usage: sse_load [options]\n"
            "  --host H              server address (default 127.0.0.1)\n"
            "  --port P              server port (default 8080)\n"
            "  --path P              request path; {i} -> stream index (default /streams/bench)\n"
            "  --streams S           connection i subscribes to stream i %% S (default 1)\n"
            "  --conns N             total connections (default 100)\n"
            "  --procs K             client processes, each with N/K connections (default 1)\n"
            "  --src-addrs A,B,..    source addresses, round-robin per connection\n"
            "  --duration S          measurement window after warmup (default 10)\n"
            "  --warmup S            seconds after READY not measured (default 1)\n"
            "  --ramp-batch B        handshakes in flight at once (default 256)\n"
            "  --ramp-timeout S      give up on handshakes still pending (default 60)\n"
            "  --expect-seqs M       every connection should see seq 1..M (publisher 0)\n"
            "  --expect-file F       file written by the publisher (--expect-out) at its end\n"
            "  --drain S             wait at most S after the expect file appears (default 3)\n"
            "  --ready-file F        written when all connections are up\n"
            "  --ready-event NAME    a connection counts as up once this SSE event arrived\n"
            "  --per-conn-out F      write per-connection lines to F.<proc>\n"
            "  --quickack            re-arm TCP_QUICKACK after every read (no delayed ACKs)\n"
            "  --read-bps B          once up, each connection reads at most B bytes/s (slow client)\n"
            "  --stall               once up, connections stop reading (= --read-bps 0)\n"
            "  --rcvbuf B            SO_RCVBUF before connect (small: a stalled reader fills\n"
            "                        the server's socket buffer sooner)\n"
            "  --close-rate R        at the end, close R connections per second (default: all\n"
            "                        at once)\n"
            "  --label L             copied into the JSON\n");
}

Opts parse_opts(int argc, char** argv) {
    Opts o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto need = [&](void) -> const char* {
            if (i + 1 >= argc) die("missing value for %s", a.c_str());
            return argv[++i];
        };
        if (a == "--host") o.host = need();
        else if (a == "--port") o.port = int(parse_ll("--port", need()));
        else if (a == "--path") o.path = need();
        else if (a == "--streams") o.streams = int(parse_ll("--streams", need()));
        else if (a == "--conns") o.conns = int(parse_ll("--conns", need()));
        else if (a == "--procs") o.procs = int(parse_ll("--procs", need()));
        else if (a == "--src-addrs") o.src_addrs = split(need(), ',');
        else if (a == "--duration") o.duration = parse_double("--duration", need());
        else if (a == "--warmup") o.warmup = parse_double("--warmup", need());
        else if (a == "--ramp-batch") o.ramp_batch = int(parse_ll("--ramp-batch", need()));
        else if (a == "--ramp-timeout") o.ramp_timeout = parse_double("--ramp-timeout", need());
        else if (a == "--expect-seqs") o.expect_seqs = parse_ll("--expect-seqs", need());
        else if (a == "--expect-file") o.expect_file = need();
        else if (a == "--drain") o.drain = parse_double("--drain", need());
        else if (a == "--ready-file") o.ready_file = need();
        else if (a == "--ready-event") o.ready_event = need();
        else if (a == "--per-conn-out") o.per_conn_out = need();
        else if (a == "--label") o.label = need();
        else if (a == "--quickack") o.quickack = true;
        else if (a == "--read-bps") o.read_bps = parse_double("--read-bps", need());
        else if (a == "--stall") o.read_bps = 0;
        else if (a == "--rcvbuf") o.rcvbuf = int(parse_ll("--rcvbuf", need()));
        else if (a == "--close-rate") o.close_rate = parse_double("--close-rate", need());
        else if (a == "-h" || a == "--help") { usage(); exit(0); }
        else { usage(); die("unknown option %s", a.c_str()); }
    }
    if (o.conns < 1 || o.conns > 10000000) die("--conns out of range");
    if (o.procs < 1 || o.procs > 64) die("--procs out of range (1..64)");
    if (o.procs > o.conns) o.procs = o.conns;
    if (o.streams < 1) die("--streams must be >= 1");
    if (o.src_addrs.empty()) die("--src-addrs is empty");
    if (o.ramp_batch < 1) o.ramp_batch = 1;
    if (o.duration < 0 || o.duration > 86400) die("--duration out of range");
    if (o.close_rate < 0 || o.close_rate > 1e6) die("--close-rate out of range");
    if (o.warmup < 0 || o.warmup > 3600) die("--warmup out of range");
    return o;
}

const char* errname(int e) {
    switch (e) {
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
    case EADDRINUSE: return "EADDRINUSE";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case ENOBUFS: return "ENOBUFS";
    case ENOMEM: return "ENOMEM";
    case EPIPE: return "EPIPE";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    case ENETUNREACH: return "ENETUNREACH";
    default: {
        static thread_local char b[32];
        snprintf(b, sizeof b, "errno_%d", e);
        return b;
    }
    }
}

enum State : uint8_t { ST_INIT, ST_CONNECTING, ST_SENDING, ST_HEADERS, ST_STREAM, ST_CLOSED };
enum Chunk : uint8_t { CH_SIZE, CH_EXT, CH_DATA, CH_DATA_CR, CH_TRAILER };

struct Conn {
    int fd = -1;
    uint32_t gidx = 0;         // global connection index
    uint32_t stream = 0;
    State state = ST_INIT;
    bool chunked = false;
    bool ready = false;        // counted as an established subscriber
    bool complete = false;     // saw the expected last seq of every publisher
    bool cr_pending = false;   // last line ended in CR: swallow a following LF
    bool throttled = false;    // slow reader out of budget: EPOLLIN off until refilled
    double budget = 0;         // bytes it may read now (--read-bps)
    Chunk ch = CH_SIZE;
    bool ch_any_digit = false;
    uint16_t req_off = 0;
    uint64_t ch_left = 0;
    std::string line;          // partial header block or partial SSE line
    // event being assembled
    bool ev_data = false, ev_stamp = false, ev_ready = false, ev_gap = false, ev_shutdown = false;
    int ev_pub = 0;
    int64_t ev_t = 0;
    uint64_t ev_seq = 0;
    // per-connection accounting
    uint32_t last_seq[kMaxPub] = {0};
    uint64_t events = 0, received = 0, missing = 0, dups = 0, gaps = 0;
    uint64_t tail = 0;         // expected seqs after the last one seen, at the end
};

struct Expect {
    bool known = false;
    int pubs = 0;
    int streams = 0;
    std::vector<uint64_t> n;   // pubs x streams
    uint64_t at(int p, int s) const { return n[size_t(p) * size_t(streams) + size_t(s % streams)]; }
};

bool load_expect_file(const std::string& path, Expect& e) {
    FILE* f = fopen(path.c_str(), "r");
    if (!f) return false;
    int p = 0, s = 0;
    bool ok = fscanf(f, "%d %d", &p, &s) == 2 && p >= 1 && s >= 1 && p <= 1024 && s <= 10000000;
    std::vector<uint64_t> v;
    if (ok) {
        v.resize(size_t(p) * size_t(s));
        for (auto& x : v) {
            unsigned long long u;
            if (fscanf(f, "%llu", &u) != 1) { ok = false; break; }
            x = u;
        }
    }
    fclose(f);
    if (!ok) return false;
    e.known = true;
    e.pubs = p;
    e.streams = s;
    e.n = std::move(v);
    return true;
}

// Finds "key" (or \"key\") followed by optional spaces, ':' and an integer.
bool find_int(const char* s, size_t n, const char* key, int64_t& out) {
    size_t kl = strlen(key);
    const char* end = s + n;
    const char* p = s;
    while (p < end) {
        const char* q = static_cast<const char*>(memmem(p, size_t(end - p), key, kl));
        if (!q) return false;
        const char* after = q + kl;
        bool quoted = q > s && q[-1] == '"' && after < end && *after == '"';
        bool escquoted = q > s + 1 && q[-1] == '"' && q[-2] == '\\' && after + 1 < end && after[0] == '\\' && after[1] == '"';
        if (quoted || escquoted) {
            const char* r = after + (quoted ? 1 : 2);
            while (r < end && (*r == ' ' || *r == '\t')) ++r;
            if (r < end && *r == ':') {
                ++r;
                while (r < end && (*r == ' ' || *r == '\t')) ++r;
                bool neg = false;
                if (r < end && *r == '-') { neg = true; ++r; }
                if (r < end && *r >= '0' && *r <= '9') {
                    int64_t v = 0;
                    while (r < end && *r >= '0' && *r <= '9') v = v * 10 + (*r++ - '0');
                    out = neg ? -v : v;
                    return true;
                }
            }
        }
        p = q + 1;
    }
    return false;
}

struct Child {
    Opts o;
    int proc_no = 0;
    uint32_t first = 0;            // first global index
    std::vector<Conn> conns;
    std::vector<sockaddr_in> srcs;
    sockaddr_in dst{};
    int ep = -1;
    int go_fd = -1, out_fd = -1;

    size_t next_start = 0;
    int inflight = 0;
    uint64_t ok = 0, failed = 0, closed_early = 0, completed = 0;
    std::map<std::string, uint64_t> errors;

    bool ramp_done = false, go = false, stopping = false;
    int64_t t_start = 0, t_go = 0, t_measure = 0, t_deadline = 0, t_hard = 0, t_expect_known = 0;
    int64_t last_expect_poll = 0;
    int64_t last_refill = 0;
    std::string ended_by = "deadline";
    Expect expect;

    Histogram hist;
    uint64_t events = 0, deliveries = 0, win_deliveries = 0, comments = 0, bytes = 0;
    uint64_t gap_events = 0, shutdown_events = 0, unknown_pub = 0, unstamped = 0, not_sse = 0;
    int64_t win_first = 0, win_last = 0;   // realtime us
    std::vector<uint64_t> per_second;
    int64_t now_rt = 0;

    std::vector<char> rbuf = std::vector<char>(256 * 1024);

    void err(const std::string& what) { ++errors[what]; }

    std::string request_for(const Conn& c) const {
        std::string path = o.path;
        size_t pos = path.find("{i}");
        if (pos != std::string::npos) path.replace(pos, 3, std::to_string(c.stream));
        std::string r = "GET " + path + " HTTP/1.1\r\nHost: " + o.host + ":" + std::to_string(o.port) +
                        "\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\nUser-Agent: pgbus-bench-sse-load/1\r\n\r\n";
        return r;
    }

    void mark_ready(Conn& c) {
        if (c.ready) return;
        c.ready = true;
        ++ok;
        --inflight;
        if (expect.known) check_complete(c);
    }

    void close_conn(Conn& c, const char* why, int e = 0) {
        if (c.state == ST_CLOSED) return;
        bool was_ready = c.ready;
        if (c.fd >= 0) {
            if (stopping) {
                struct linger lg{1, 0};   // RST: leave no TIME_WAIT behind
                setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            }
            close(c.fd);
            c.fd = -1;
        }
        c.state = ST_CLOSED;
        std::string().swap(c.line);
        if (stopping) return;
        std::string w = why;
        if (e) { w += ":"; w += errname(e); }
        if (was_ready) {
            ++closed_early;
            if (c.complete) --completed;
            err("closed_after_ready:" + w);
        } else {
            ++failed;
            --inflight;
            err(w);
        }
    }

    void start_conn(size_t li) {
        Conn& c = conns[li];
        ++inflight;
        c.state = ST_CONNECTING;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) { close_conn(c, "socket", errno); return; }
        c.fd = fd;
        int one = 1;
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
        if (o.rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o.rcvbuf, sizeof o.rcvbuf);
        const sockaddr_in& src = srcs[c.gidx % srcs.size()];
        if (bind(fd, reinterpret_cast<const sockaddr*>(&src), sizeof src) != 0) { close_conn(c, "bind", errno); return; }
        if (connect(fd, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) != 0 && errno != EINPROGRESS) {
            close_conn(c, "connect", errno);
            return;
        }
        epoll_event ev{};
        ev.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP;
        ev.data.u64 = li;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) { close_conn(c, "epoll_ctl", errno); return; }
    }

    void on_writable(size_t li) {
        Conn& c = conns[li];
        if (c.state == ST_CONNECTING) {
            int e = 0;
            socklen_t l = sizeof e;
            getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &e, &l);
            if (e) { close_conn(c, "connect", e); return; }
            c.state = ST_SENDING;
        }
        if (c.state == ST_SENDING) {
            std::string req = request_for(c);
            while (c.req_off < req.size()) {
                ssize_t w = send(c.fd, req.data() + c.req_off, req.size() - c.req_off, MSG_NOSIGNAL);
                if (w < 0) {
                    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
                    if (errno == EINTR) continue;
                    close_conn(c, "send", errno);
                    return;
                }
                c.req_off = uint16_t(c.req_off + w);
            }
            c.state = ST_HEADERS;
            epoll_event ev{};
            ev.events = EPOLLIN | EPOLLRDHUP;
            ev.data.u64 = li;
            epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        }
    }

    void check_complete(Conn& c) {
        if (c.complete || !c.ready) return;
        for (int p = 0; p < expect.pubs && p < kMaxPub; ++p)
            if (c.last_seq[p] < expect.at(p, int(c.stream))) return;
        c.complete = true;
        ++completed;
    }

    void dispatch(Conn& c) {
        if (!c.ev_data) { c.ev_ready = c.ev_gap = c.ev_shutdown = false; return; }
        ++c.events;
        ++events;
        if (c.ev_gap) ++gap_events;
        if (c.ev_shutdown) ++shutdown_events;
        if (c.ev_ready && !c.ready) mark_ready(c);
        if (c.ev_stamp) {
            ++deliveries;
            if (c.ev_pub < 0 || c.ev_pub >= kMaxPub) {
                ++unknown_pub;
            } else {
                ++c.received;
                uint32_t last = c.last_seq[c.ev_pub];
                uint64_t s = c.ev_seq;
                if (s == uint64_t(last) + 1) {
                    c.last_seq[c.ev_pub] = uint32_t(s);
                } else if (s > uint64_t(last) + 1) {
                    c.missing += s - last - 1;
                    ++c.gaps;
                    c.last_seq[c.ev_pub] = uint32_t(s);
                } else {
                    ++c.dups;   // seq at or below the last one seen: duplicate or reordered
                }
                if (expect.known && !c.complete) check_complete(c);
            }
            if (go && now_rt >= t_measure) {
                int64_t lat = now_rt - c.ev_t;
                hist.record(lat);
                ++win_deliveries;
                if (!win_first) win_first = now_rt;
                win_last = now_rt;
                size_t sec = size_t((now_rt - t_measure) / 1000000);
                if (sec < per_second.size()) ++per_second[sec];
            }
        } else {
            ++unstamped;
        }
        c.ev_data = c.ev_stamp = c.ev_ready = c.ev_gap = c.ev_shutdown = false;
    }

    void sse_line(Conn& c, const char* s, size_t n) {
        if (n == 0) { dispatch(c); return; }
        if (s[0] == ':') { ++comments; return; }
        const char* colon = static_cast<const char*>(memchr(s, ':', n));
        size_t fl = colon ? size_t(colon - s) : n;
        const char* v = colon ? colon + 1 : s + n;
        size_t vl = colon ? n - fl - 1 : 0;
        if (vl && *v == ' ') { ++v; --vl; }
        if (fl == 4 && !memcmp(s, "data", 4)) {
            c.ev_data = true;
            if (!c.ev_stamp) {
                int64_t t = 0, seq = 0, p = 0;
                if (find_int(v, vl, "t", t) && find_int(v, vl, "seq", seq)) {
                    find_int(v, vl, "p", p);
                    c.ev_stamp = true;
                    c.ev_t = t;
                    c.ev_seq = uint64_t(seq);
                    c.ev_pub = int(p);
                }
            }
        } else if (fl == 5 && !memcmp(s, "event", 5)) {
            std::string name(v, vl);
            if (!o.ready_event.empty() && name == o.ready_event) c.ev_ready = true;
            if (name == "pgbus:gap-detected") c.ev_gap = true;
            if (name == "pgbus:shutdown") c.ev_shutdown = true;
        }
        // id:, retry: and unknown fields need nothing here
    }

    // Feeds SSE bytes; returns false if the connection was closed.
    bool sse_feed(Conn& c, const char* p, size_t n) {
        const char* end = p + n;
        while (p < end) {
            if (c.cr_pending) {
                c.cr_pending = false;
                if (*p == '\n') { ++p; continue; }
            }
            const char* q = p;
            while (q < end && *q != '\n' && *q != '\r') ++q;
            if (q == end) {
                c.line.append(p, size_t(q - p));
                if (c.line.size() > kMaxLine) { close_conn(c, "line_too_long"); return false; }
                break;
            }
            if (c.line.empty()) {
                sse_line(c, p, size_t(q - p));
            } else {
                c.line.append(p, size_t(q - p));
                sse_line(c, c.line.data(), c.line.size());
                c.line.clear();
            }
            if (*q == '\r') c.cr_pending = true;
            p = q + 1;
        }
        return true;
    }

    // Removes chunked framing; returns false if the connection was closed.
    bool body_feed(Conn& c, const char* p, size_t n) {
        if (!c.chunked) return sse_feed(c, p, n);
        const char* end = p + n;
        while (p < end) {
            switch (c.ch) {
            case CH_SIZE: {
                char x = *p++;
                int d = (x >= '0' && x <= '9') ? x - '0' : (x >= 'a' && x <= 'f') ? x - 'a' + 10
                        : (x >= 'A' && x <= 'F') ? x - 'A' + 10 : -1;
                if (d >= 0) {
                    if (c.ch_left > (uint64_t(1) << 40)) { close_conn(c, "chunk_size"); return false; }
                    c.ch_left = c.ch_left * 16 + uint64_t(d);
                    c.ch_any_digit = true;
                } else if (x == ';') {
                    c.ch = CH_EXT;
                } else if (x == '\r') {
                } else if (x == '\n') {
                    if (!c.ch_any_digit) { close_conn(c, "chunk_syntax"); return false; }
                    if (c.ch_left == 0) { c.ch = CH_TRAILER; close_conn(c, "stream_ended"); return false; }
                    c.ch = CH_DATA;
                } else {
                    close_conn(c, "chunk_syntax");
                    return false;
                }
                break;
            }
            case CH_EXT:
                if (*p++ == '\n') {
                    if (c.ch_left == 0) { close_conn(c, "stream_ended"); return false; }
                    c.ch = CH_DATA;
                }
                break;
            case CH_DATA: {
                size_t take = size_t(std::min<uint64_t>(c.ch_left, uint64_t(end - p)));
                if (!sse_feed(c, p, take)) return false;
                p += take;
                c.ch_left -= take;
                if (c.ch_left == 0) c.ch = CH_DATA_CR;
                break;
            }
            case CH_DATA_CR:
                if (*p++ == '\n') { c.ch = CH_SIZE; c.ch_left = 0; c.ch_any_digit = false; }
                break;
            case CH_TRAILER:
                return false;
            }
        }
        return true;
    }

    bool headers_feed(size_t li, const char* p, size_t n) {
        Conn& c = conns[li];
        c.line.append(p, n);
        size_t hend = c.line.find("\r\n\r\n");
        size_t skip = 4;
        if (hend == std::string::npos) {
            hend = c.line.find("\n\n");
            skip = 2;
        }
        if (hend == std::string::npos) {
            if (c.line.size() > kMaxHeader) { close_conn(c, "header_too_long"); return false; }
            return true;
        }
        std::string head = c.line.substr(0, hend);
        std::string rest = c.line.substr(hend + skip);
        c.line.clear();
        int status = 0;
        if (head.size() < 12 || head.compare(0, 5, "HTTP/") != 0 || sscanf(head.c_str() + 9, "%3d", &status) != 1) {
            close_conn(c, "bad_status_line");
            return false;
        }
        if (status != 200) {
            close_conn(c, ("http_" + std::to_string(status)).c_str());
            return false;
        }
        std::string lower = head;
        for (auto& ch : lower) ch = char(tolower(static_cast<unsigned char>(ch)));
        size_t te = lower.find("\ntransfer-encoding:");
        if (te != std::string::npos) {
            size_t eol = lower.find('\n', te + 1);
            if (lower.substr(te, eol == std::string::npos ? std::string::npos : eol - te).find("chunked") != std::string::npos)
                c.chunked = true;
        }
        if (lower.find("\ncontent-type: text/event-stream") == std::string::npos &&
            lower.find("\ncontent-type:text/event-stream") == std::string::npos)
            ++not_sse;
        c.state = ST_STREAM;
        if (o.ready_event.empty()) mark_ready(c);
        if (!rest.empty()) return body_feed(c, rest.data(), rest.size());
        return true;
    }

    // Slow readers: a connection that is up reads only its budget; out of
    // budget, it leaves EPOLLIN (the server's writes then back up) until
    // refill() gives it more.
    bool slow(const Conn& c) const { return o.read_bps >= 0 && c.ready; }
    void set_reading(size_t li, bool on) {
        Conn& c = conns[li];
        if (c.throttled == !on) return;
        c.throttled = !on;
        epoll_event ev{};
        ev.events = (on ? EPOLLIN : 0u) | EPOLLRDHUP;
        ev.data.u64 = li;
        epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
    }
    void refill(double dt) {
        double cap = std::max(o.read_bps, 4096.0);
        for (size_t li = 0; li < conns.size(); ++li) {
            Conn& c = conns[li];
            if (c.state == ST_CLOSED || !slow(c)) continue;
            c.budget = std::min(cap, c.budget + o.read_bps * dt);
            if (c.throttled && c.budget >= 1) set_reading(li, true);
        }
    }

    void on_readable(size_t li) {
        Conn& c = conns[li];
        for (int round = 0; round < 4; ++round) {
            size_t want = rbuf.size();
            if (slow(c)) {
                if (c.budget < 1) { set_reading(li, false); return; }
                want = std::min(want, size_t(c.budget));
            }
            ssize_t r = recv(c.fd, rbuf.data(), want, 0);
            if (r > 0 && slow(c)) c.budget -= double(r);
            if (r < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) return;
                if (errno == EINTR) continue;
                close_conn(c, "recv", errno);
                return;
            }
            if (r == 0) { close_conn(c, "eof"); return; }
            now_rt = realtime_us();
            if (o.quickack) {
                int one = 1;
                setsockopt(c.fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
            }
            bytes += uint64_t(r);
            bool alive = (c.state == ST_HEADERS) ? headers_feed(li, rbuf.data(), size_t(r))
                                                 : body_feed(c, rbuf.data(), size_t(r));
            if (!alive || c.state == ST_CLOSED) return;
            if (size_t(r) < want) return;
        }
    }

    void write_ready() {
        char line[96];
        int n = snprintf(line, sizeof line, "R %llu %llu\n", (unsigned long long)ok, (unsigned long long)failed);
        if (write(out_fd, line, size_t(n)) < 0) {}
    }

    void on_go() {
        go = true;
        t_go = mono_us();
        int64_t rt = realtime_us();
        // phases in realtime (deliveries are stamped with realtime)
        t_measure = rt + int64_t(o.warmup * 1e6);
        t_deadline = t_go + int64_t((o.warmup + o.duration) * 1e6);
        per_second.assign(size_t(o.duration) + 2, 0);
        if (o.expect_seqs > 0) {
            expect.known = true;
            expect.pubs = 1;
            expect.streams = 1;
            expect.n.assign(1, uint64_t(o.expect_seqs));
            for (auto& c : conns) check_complete(c);
        }
    }

    void run() {
        t_start = mono_us();
        t_hard = t_start + int64_t((o.ramp_timeout + o.warmup + o.duration + o.drain + 60) * 1e6);
        ep = epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0) die("epoll_create1 failed");
        epoll_event gev{};
        gev.events = EPOLLIN;
        gev.data.u64 = ~uint64_t(0);
        epoll_ctl(ep, EPOLL_CTL_ADD, go_fd, &gev);
        std::vector<epoll_event> evs(1024);

        while (true) {
            int64_t now = mono_us();
            while (!ramp_done && next_start < conns.size() && inflight < o.ramp_batch) start_conn(next_start++);
            if (!ramp_done) {
                bool timed_out = now - t_start > int64_t(o.ramp_timeout * 1e6);
                if (timed_out) {
                    for (auto& c : conns) {
                        if (c.ready || c.state == ST_CLOSED) continue;
                        if (c.state == ST_INIT) {   // never started: no handshake in flight
                            c.state = ST_CLOSED;
                            ++failed;
                            err("ramp_timeout:not_started");
                            continue;
                        }
                        const char* st = c.state == ST_CONNECTING ? "ramp_timeout:connecting"
                                       : c.state == ST_SENDING ? "ramp_timeout:sending_request"
                                       : c.state == ST_HEADERS ? "ramp_timeout:awaiting_headers"
                                       : "ramp_timeout:awaiting_ready_event";
                        close_conn(c, st);
                    }
                    next_start = conns.size();
                }
                if (next_start == conns.size() && inflight == 0) {
                    ramp_done = true;
                    write_ready();
                }
            }
            if (go) {
                if (!o.expect_file.empty() && !expect.known && now - last_expect_poll > 100000) {
                    last_expect_poll = now;
                    if (load_expect_file(o.expect_file, expect)) {
                        t_expect_known = now;
                        for (auto& c : conns) check_complete(c);
                    }
                }
                uint64_t live = ok - closed_early;
                if (expect.known && completed >= live) { ended_by = "complete"; break; }
                if (now >= t_deadline) { ended_by = "deadline"; break; }
                if (t_expect_known && now - t_expect_known > int64_t(o.drain * 1e6)) { ended_by = "drain"; break; }
            }
            if (now >= t_hard) { ended_by = "hard_limit"; break; }

            if (o.read_bps >= 0) {
                if (last_refill == 0) last_refill = now;
                if (now - last_refill >= 20000) { refill(double(now - last_refill) / 1e6); last_refill = now; }
            }
            int nev = epoll_wait(ep, evs.data(), int(evs.size()), 20);
            if (nev < 0) {
                if (errno == EINTR) continue;
                die("epoll_wait failed");
            }
            now_rt = realtime_us();
            for (int i = 0; i < nev; ++i) {
                uint64_t li = evs[size_t(i)].data.u64;
                uint32_t e = evs[size_t(i)].events;
                if (li == ~uint64_t(0)) {
                    char b;
                    ssize_t r = read(go_fd, &b, 1);
                    if (r == 1 && !go) on_go();
                    else if (r == 0) { ended_by = "parent_gone"; t_hard = 0; }
                    if (r <= 0) epoll_ctl(ep, EPOLL_CTL_DEL, go_fd, nullptr);
                    continue;
                }
                Conn& c = conns[li];
                if (c.state == ST_CLOSED) continue;
                if (c.state == ST_CONNECTING || c.state == ST_SENDING) {
                    if (e & (EPOLLOUT | EPOLLERR | EPOLLHUP)) on_writable(li);
                    continue;
                }
                if (c.throttled) {   // not reading: only a close by the server gets here
                    if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) close_conn(c, "closed_by_server_while_not_reading");
                    continue;
                }
                if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(li);
            }
        }
        stopping = true;
        // Paced: one close per 1/R s, each its own event at the server (a
        // wave of clients leaving, not one burst).
        const int64_t gap_us = o.close_rate > 0 ? int64_t(1e6 / (o.close_rate / o.procs)) : 0;
        int64_t next_us = mono_us();
        for (auto& c : conns) {
            if (c.state == ST_CLOSED) continue;
            if (gap_us > 0) {
                for (int64_t now = mono_us(); now < next_us; now = mono_us())
                    usleep(useconds_t(next_us - now));
                next_us += gap_us;
            }
            close_conn(c, "end");
        }
    }

    void report() {
        // final loss accounting against the expectation
        uint64_t missing = 0, tail = 0, with_tail = 0, dups = 0, gaps = 0, with_loss = 0, with_dups = 0, zero = 0,
                 max_missing = 0, max_tail = 0;
        uint64_t min_recv = UINT64_MAX, max_recv = 0, complete_conns = 0, live = 0;
        FILE* pc = nullptr;
        if (!o.per_conn_out.empty()) {
            std::string f = o.per_conn_out + "." + std::to_string(proc_no);
            pc = fopen(f.c_str(), "w");
            if (pc) fprintf(pc, "# conn stream ready events received missing_in_gaps missing_tail dups gaps last_seq_p0\n");
        }
        for (auto& c : conns) {
            if (!c.ready) continue;
            ++live;
            if (expect.known) {
                for (int p = 0; p < expect.pubs && p < kMaxPub; ++p) {
                    uint64_t want = expect.at(p, int(c.stream));
                    if (want > c.last_seq[p]) c.tail += want - c.last_seq[p];
                }
            }
            missing += c.missing;
            tail += c.tail;
            dups += c.dups;
            gaps += c.gaps;
            if (c.missing) ++with_loss;
            if (c.tail) ++with_tail;
            max_tail = std::max(max_tail, c.tail);
            if (c.dups) ++with_dups;
            if (c.received == 0) ++zero;
            if (c.complete) ++complete_conns;
            max_missing = std::max(max_missing, c.missing);
            min_recv = std::min(min_recv, c.received);
            max_recv = std::max(max_recv, c.received);
            if (pc)
                fprintf(pc, "%u %u %d %llu %llu %llu %llu %llu %llu %u\n", c.gidx, c.stream, int(c.ready),
                        (unsigned long long)c.events, (unsigned long long)c.received, (unsigned long long)c.missing,
                        (unsigned long long)c.tail, (unsigned long long)c.dups, (unsigned long long)c.gaps,
                        c.last_seq[0]);
        }
        if (pc) fclose(pc);
        if (min_recv == UINT64_MAX) min_recv = 0;
        long rss, hwm;
        self_rss_kb(rss, hwm);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);

        std::string out;
        char b[256];
        auto k = [&](const char* key, long long v) {
            snprintf(b, sizeof b, "k %s %lld\n", key, v);
            out += b;
        };
        k("conns", (long long)conns.size());
        k("ok", (long long)ok);
        k("failed", (long long)failed);
        k("closed_early", (long long)closed_early);
        k("live_at_end", (long long)live);
        k("events", (long long)events);
        k("deliveries", (long long)deliveries);
        k("win_deliveries", (long long)win_deliveries);
        k("win_first", (long long)win_first);
        k("win_last", (long long)win_last);
        k("comments", (long long)comments);
        k("bytes", (long long)bytes);
        k("gap_events", (long long)gap_events);
        k("shutdown_events", (long long)shutdown_events);
        k("unknown_pub", (long long)unknown_pub);
        k("unstamped", (long long)unstamped);
        k("not_sse", (long long)not_sse);
        k("missing", (long long)missing);
        k("tail", (long long)tail);
        k("with_tail", (long long)with_tail);
        k("max_tail", (long long)max_tail);
        k("dups", (long long)dups);
        k("gaps", (long long)gaps);
        k("with_loss", (long long)with_loss);
        k("with_dups", (long long)with_dups);
        k("zero", (long long)zero);
        k("max_missing", (long long)max_missing);
        k("min_recv", (long long)min_recv);
        k("max_recv", (long long)max_recv);
        k("complete_conns", (long long)complete_conns);
        k("expect_known", expect.known ? 1 : 0);
        k("rss_kb", rss);
        k("hwm_kb", hwm);
        k("utime_us", (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec);
        k("stime_us", (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec);
        k("hist_max", (long long)hist.max());
        k("hist_neg", (long long)hist.negatives());
        k("ramp_us", (long long)((t_go ? t_go : mono_us()) - t_start));
        snprintf(b, sizeof b, "x ended_by %s\n", ended_by.c_str());
        out += b;
        const auto& bk = hist.buckets();
        for (size_t i = 0; i < bk.size(); ++i)
            if (bk[i]) {
                snprintf(b, sizeof b, "h %zu %llu\n", i, (unsigned long long)bk[i]);
                out += b;
            }
        for (size_t i = 0; i < per_second.size(); ++i) {
            snprintf(b, sizeof b, "s %zu %llu\n", i, (unsigned long long)per_second[i]);
            out += b;
        }
        for (auto& e : errors) {
            snprintf(b, sizeof b, "e %s %llu\n", e.first.c_str(), (unsigned long long)e.second);
            out += b;
        }
        out += "END\n";
        size_t off = 0;
        while (off < out.size()) {
            ssize_t w = write(out_fd, out.data() + off, out.size() - off);
            if (w < 0) {
                if (errno == EINTR) continue;
                break;
            }
            off += size_t(w);
        }
    }
};

struct Agg {
    std::map<std::string, long long> sum;
    std::map<std::string, long long> mx;
    std::map<std::string, long long> mn;
    std::map<std::string, uint64_t> errors;
    std::map<std::string, int> ended_by;
    std::vector<uint64_t> per_second;
    Histogram hist;
    std::vector<long> rss, hwm;
};

bool read_line_timeout(int fd, std::string& line, int64_t deadline_us) {
    line.clear();
    while (true) {
        int64_t left = deadline_us - mono_us();
        if (left <= 0) return false;
        pollfd p{fd, POLLIN, 0};
        int r = poll(&p, 1, int(std::min<int64_t>(left / 1000 + 1, 1000)));
        if (r < 0 && errno != EINTR) return false;
        if (r <= 0) continue;
        char ch;
        ssize_t n = read(fd, &ch, 1);
        if (n <= 0) return false;
        if (ch == '\n') return true;
        line += ch;
    }
}

void write_file_atomic(const std::string& path, const std::string& content) {
    std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "w");
    if (!f) { fprintf(stderr, "sse_load: cannot write %s: %s\n", tmp.c_str(), strerror(errno)); return; }
    fputs(content.c_str(), f);
    fclose(f);
    rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    Opts o = parse_opts(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    rlim_t nofile = raise_nofile();
    int per_proc_max = (o.conns + o.procs - 1) / o.procs;
    if (rlim_t(per_proc_max) + 32 > nofile)
        fprintf(stderr, "sse_load: warning: %d connections per process but RLIMIT_NOFILE is %llu; use more --procs\n",
                per_proc_max, (unsigned long long)nofile);

    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(uint16_t(o.port));
    if (inet_pton(AF_INET, o.host.c_str(), &dst.sin_addr) != 1) die("--host must be an IPv4 address: %s", o.host.c_str());
    std::vector<sockaddr_in> srcs;
    for (auto& a : o.src_addrs) {
        sockaddr_in s{};
        s.sin_family = AF_INET;
        if (inet_pton(AF_INET, a.c_str(), &s.sin_addr) != 1) die("bad source address %s", a.c_str());
        srcs.push_back(s);
    }
    if (!o.expect_file.empty()) unlink(o.expect_file.c_str());
    if (!o.ready_file.empty()) unlink(o.ready_file.c_str());

    struct Kid { pid_t pid; int out_r; int go_w; };
    std::vector<Kid> kids;
    int64_t t0 = mono_us();
    uint32_t next = 0;
    for (int k = 0; k < o.procs; ++k) {
        uint32_t cnt = uint32_t(o.conns / o.procs + (k < o.conns % o.procs ? 1 : 0));
        int outp[2], gop[2];
        if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(gop, O_CLOEXEC) != 0) die("pipe failed");
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) die("fork failed");
        if (pid == 0) {
            close(outp[0]);
            close(gop[1]);
            for (auto& kd : kids) { close(kd.out_r); close(kd.go_w); }
            Child ch;
            ch.o = o;
            ch.proc_no = k;
            ch.first = next;
            ch.srcs = srcs;
            ch.dst = dst;
            ch.go_fd = gop[0];
            ch.out_fd = outp[1];
            ch.conns.resize(cnt);
            for (uint32_t i = 0; i < cnt; ++i) {
                ch.conns[i].gidx = next + i;
                ch.conns[i].stream = (next + i) % uint32_t(o.streams);
            }
            ch.run();
            ch.report();
            _exit(0);
        }
        close(outp[1]);
        close(gop[0]);
        kids.push_back({pid, outp[0], gop[1]});
        next += cnt;
    }

    // Phase 1: every child reports its ramp result.
    unsigned long long ok = 0, failed = 0;
    int64_t ready_deadline = mono_us() + int64_t((o.ramp_timeout + 30) * 1e6);
    bool all_ready = true;
    for (auto& kd : kids) {
        std::string line;
        if (!read_line_timeout(kd.out_r, line, ready_deadline) || line.size() < 2 || line[0] != 'R') {
            all_ready = false;
            break;
        }
        unsigned long long a = 0, b = 0;
        sscanf(line.c_str() + 2, "%llu %llu", &a, &b);
        ok += a;
        failed += b;
    }
    if (!all_ready) {
        fprintf(stderr, "sse_load: a client process did not finish its ramp; killing children\n");
        for (auto& kd : kids) kill(kd.pid, SIGKILL);
        for (auto& kd : kids) waitpid(kd.pid, nullptr, 0);
        return 3;
    }
    double ramp_s = double(mono_us() - t0) / 1e6;
    fprintf(stderr, "sse_load: READY ok=%llu failed=%llu ramp=%.2fs\n", ok, failed, ramp_s);
    if (!o.ready_file.empty()) {
        char b[128];
        snprintf(b, sizeof b, "ok=%llu failed=%llu ramp_s=%.3f\n", ok, failed, ramp_s);
        write_file_atomic(o.ready_file, b);
    }
    for (auto& kd : kids) {
        if (write(kd.go_w, "g", 1) < 0) {}
    }

    // Phase 2: collect results.
    Agg ag;
    int64_t res_deadline = mono_us() + int64_t((o.warmup + o.duration + o.drain + 90) * 1e6);
    int incomplete = 0;
    for (auto& kd : kids) {
        std::string line;
        bool got_end = false;
        long rss = 0, hwm = 0;
        while (read_line_timeout(kd.out_r, line, res_deadline)) {
            if (line == "END") { got_end = true; break; }
            char kind = line[0];
            if (kind == 'k') {
                char key[64];
                long long v = 0;
                if (sscanf(line.c_str() + 2, "%63s %lld", key, &v) != 2) continue;
                std::string ks = key;
                if (ks == "win_first" && v == 0) continue;   // child without deliveries
                ag.sum[ks] += v;
                if (!ag.mx.count(ks) || v > ag.mx[ks]) ag.mx[ks] = v;
                if (!ag.mn.count(ks) || v < ag.mn[ks]) ag.mn[ks] = v;
                if (ks == "rss_kb") rss = long(v);
                if (ks == "hwm_kb") hwm = long(v);
            } else if (kind == 'h') {
                int idx;
                unsigned long long c;
                if (sscanf(line.c_str() + 2, "%d %llu", &idx, &c) == 2) ag.hist.add_bucket(idx, c);
            } else if (kind == 's') {
                size_t i;
                unsigned long long c;
                if (sscanf(line.c_str() + 2, "%zu %llu", &i, &c) == 2) {
                    if (ag.per_second.size() <= i) ag.per_second.resize(i + 1, 0);
                    ag.per_second[i] += c;
                }
            } else if (kind == 'e') {
                char key[200];
                unsigned long long c;
                if (sscanf(line.c_str() + 2, "%199s %llu", key, &c) == 2) ag.errors[key] += c;
            } else if (kind == 'x') {
                char key[64], val[64];
                if (sscanf(line.c_str() + 2, "%63s %63s", key, val) == 2) ag.ended_by[val]++;
            }
        }
        if (!got_end) {
            ++incomplete;
            kill(kd.pid, SIGKILL);
        }
        ag.rss.push_back(rss);
        ag.hwm.push_back(hwm);
        close(kd.out_r);
        close(kd.go_w);
    }
    for (auto& kd : kids) waitpid(kd.pid, nullptr, 0);
    ag.hist.merge_meta(uint64_t(ag.mx["hist_max"]), uint64_t(ag.sum["hist_neg"]));

    auto S = [&](const char* k) { return ag.sum.count(k) ? ag.sum[k] : 0LL; };
    long long win_first = ag.mn.count("win_first") ? ag.mn["win_first"] : 0;
    long long win_last = ag.mx.count("win_last") ? ag.mx["win_last"] : 0;
    double span = win_last > win_first ? double(win_last - win_first) / 1e6 : 0.0;

    Json j;
    j.open_obj();
    j.kv("tool", "sse_load");
    if (!o.label.empty()) j.kv("label", o.label);
    j.kv("host", o.host);
    j.kvi("port", o.port);
    j.kv("path", o.path);
    j.kvi("streams", o.streams);
    j.kvi("conns", o.conns);
    j.kvi("procs", o.procs);
    j.kvi("src_addrs", int64_t(o.src_addrs.size()));
    j.kv("quickack", o.quickack);
    j.kvd("warmup_s", o.warmup, 1);
    j.kvd("duration_s", o.duration, 1);
    j.kvd("ramp_s", ramp_s, 3);
    j.kvi("connections_ok", (long long)ok);
    j.kvi("connections_failed", (long long)failed);
    j.kvi("connections_closed_early", S("closed_early"));
    j.kvi("events", S("events"));
    j.kvi("deliveries", S("deliveries"));
    j.kvi("deliveries_in_window", S("win_deliveries"));
    j.kvd("window_s", span, 3);
    j.kvd("deliveries_per_s", span > 0 ? double(S("win_deliveries")) / span : 0.0, 1);
    j.histogram("latency_us", ag.hist);
    j.open_obj("loss");
    j.kv("expectation_known", S("expect_known") == o.procs);
    j.kvi("missing_total", S("missing") + S("tail"));
    j.kvi("missing_in_gaps", S("missing"));
    j.kvi("missing_tail", S("tail"));
    j.kvi("conns_with_tail", S("with_tail"));
    j.kvi("max_tail_per_conn", ag.mx["max_tail"]);
    j.kvi("duplicates_total", S("dups"));
    j.kvi("gaps_total", S("gaps"));
    j.kvi("conns_with_gaps", S("with_loss"));
    j.kvi("conns_with_duplicates", S("with_dups"));
    j.kvi("conns_without_deliveries", S("zero"));
    j.kvi("conns_complete", S("complete_conns"));
    j.kvi("max_missing_in_gaps_per_conn", ag.mx["max_missing"]);
    j.kvi("min_received_per_conn", ag.mn["min_recv"]);
    j.kvi("max_received_per_conn", ag.mx["max_recv"]);
    j.kvi("gap_detected_events", S("gap_events"));
    j.kvi("unknown_publisher_events", S("unknown_pub"));
    j.close_obj();
    j.kvi("unstamped_events", S("unstamped"));
    j.kvi("shutdown_events", S("shutdown_events"));
    j.kvi("comments", S("comments"));
    j.kvi("bytes", S("bytes"));
    j.kvi("non_sse_content_type", S("not_sse"));
    j.open_arr("deliveries_per_second");
    for (auto v : ag.per_second) j.kvu(nullptr, v);
    j.close_arr();
    j.open_obj("errors");
    for (auto& e : ag.errors) j.kvu(e.first.c_str(), e.second);
    j.close_obj();
    j.open_obj("ended_by");
    for (auto& e : ag.ended_by) j.kvi(e.first.c_str(), e.second);
    j.close_obj();
    j.open_obj("client");
    long prss, phwm;
    self_rss_kb(prss, phwm);
    long long rss_total = prss, hwm_total = phwm;
    for (auto v : ag.rss) rss_total += v;
    for (auto v : ag.hwm) hwm_total += v;
    j.kvi("rss_kb", rss_total);
    j.kvi("peak_rss_kb", hwm_total);
    j.kvd("cpu_user_s", double(S("utime_us")) / 1e6, 3);
    j.kvd("cpu_sys_s", double(S("stime_us")) / 1e6, 3);
    j.kvi("rlimit_nofile", (long long)nofile);
    j.kvi("processes_incomplete", incomplete);
    j.close_obj();
    j.close_obj();
    printf("%s\n", j.out.c_str());
    fflush(stdout);
    if (ok == 0) {
        fprintf(stderr, "sse_load: no connection succeeded (see \"errors\")\n");
        return 3;
    }
    return incomplete ? 4 : 0;
}
