// Shared helpers for the benchmark client and publisher: clocks, a log-linear
// latency histogram (constant memory, ~0.8% resolution), a tiny JSON writer
// and option parsing. No dependencies beyond libc / the C++17 standard library.
#pragma once

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include <sys/resource.h>

namespace bench {

inline int64_t realtime_us() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

inline int64_t mono_us() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

inline int64_t mono_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Log-linear histogram of non-negative integer values (microseconds here).
// Values < 256 are exact; above, each power of two is split in 128 buckets.
class Histogram {
public:
    static constexpr int kSub = 128;                 // sub-buckets per octave
    static constexpr int kExact = 256;               // values stored exactly
    static constexpr int kOctaves = 56;              // covers up to 2^63
    static constexpr int kBuckets = kExact + kOctaves * kSub;

    Histogram() : counts_(kBuckets, 0) {}

    static int index_of(uint64_t v) {
        if (v < uint64_t(kExact)) return int(v);
        int k = 63 - __builtin_clzll(v);              // k >= 8
        int shift = k - 7;
        int mant = int(v >> shift);                   // 128..255
        return kExact + (k - 8) * kSub + (mant - kSub);
    }
    // Lowest value that falls in bucket i.
    static uint64_t lower_of(int i) {
        if (i < kExact) return uint64_t(i);
        int k = 8 + (i - kExact) / kSub;
        uint64_t mant = uint64_t(kSub + (i - kExact) % kSub);
        return mant << (k - 7);
    }
    static uint64_t width_of(int i) {
        if (i < kExact) return 1;
        int k = 8 + (i - kExact) / kSub;
        return uint64_t(1) << (k - 7);
    }

    void record(int64_t v) {
        if (v < 0) { ++negatives_; v = 0; }
        uint64_t u = uint64_t(v);
        ++counts_[index_of(u)];
        ++total_;
        sum_ += double(u);
        if (u > max_) max_ = u;
    }
    void add_bucket(int i, uint64_t c) {
        if (i < 0 || i >= kBuckets || c == 0) return;
        counts_[i] += c;
        total_ += c;
        uint64_t mid = lower_of(i) + width_of(i) / 2;
        sum_ += double(mid) * double(c);
    }
    void merge_meta(uint64_t max, uint64_t negatives) {
        if (max > max_) max_ = max;
        negatives_ += negatives;
    }

    uint64_t count() const { return total_; }
    uint64_t max() const { return max_; }
    uint64_t negatives() const { return negatives_; }
    double mean() const { return total_ ? sum_ / double(total_) : 0.0; }
    const std::vector<uint64_t>& buckets() const { return counts_; }

    // Value at quantile q (0..1): midpoint of the bucket holding that rank,
    // never above the exact maximum.
    uint64_t quantile(double q) const {
        if (total_ == 0) return 0;
        uint64_t rank = uint64_t(std::ceil(q * double(total_)));
        if (rank < 1) rank = 1;
        uint64_t cum = 0;
        for (int i = 0; i < kBuckets; ++i) {
            cum += counts_[i];
            if (cum >= rank) {
                uint64_t v = lower_of(i) + width_of(i) / 2;
                return v > max_ ? max_ : v;
            }
        }
        return max_;
    }

private:
    std::vector<uint64_t> counts_;
    uint64_t total_ = 0;
    uint64_t max_ = 0;
    uint64_t negatives_ = 0;
    double sum_ = 0;
};

// Minimal JSON writer: keeps commas right, escapes strings.
class Json {
public:
    std::string out;

    void open_obj(const char* key = nullptr) { pre(key); out += '{'; first_ = true; }
    void close_obj() { out += '}'; first_ = false; }
    void open_arr(const char* key = nullptr) { pre(key); out += '['; first_ = true; }
    void close_arr() { out += ']'; first_ = false; }
    void kv(const char* key, const std::string& s) { pre(key); str(s); }
    void kv(const char* key, const char* s) { pre(key); str(s); }
    void kv(const char* key, bool b) { pre(key); out += b ? "true" : "false"; }
    void kvi(const char* key, int64_t v) { pre(key); char b[32]; snprintf(b, sizeof b, "%" PRId64, v); out += b; }
    void kvu(const char* key, uint64_t v) { pre(key); char b[32]; snprintf(b, sizeof b, "%" PRIu64, v); out += b; }
    void kvd(const char* key, double v, int prec = 3) {
        pre(key);
        if (!std::isfinite(v)) { out += "null"; return; }
        char b[64]; snprintf(b, sizeof b, "%.*f", prec, v); out += b;
    }
    void null(const char* key) { pre(key); out += "null"; }
    void raw(const char* key, const std::string& r) { pre(key); out += r; }

    void histogram(const char* key, const Histogram& h) {
        open_obj(key);
        kvu("count", h.count());
        kvu("p50", h.quantile(0.50));
        kvu("p90", h.quantile(0.90));
        kvu("p99", h.quantile(0.99));
        kvu("p999", h.quantile(0.999));
        kvu("max", h.max());
        kvd("mean", h.mean(), 1);
        if (h.negatives()) kvu("negative_clamped", h.negatives());
        close_obj();
    }

private:
    bool first_ = true;
    void pre(const char* key) {
        if (!first_) out += ',';
        first_ = false;
        if (key) { str(key); out += ':'; }
    }
    void str(const std::string& s) {
        out += '"';
        for (unsigned char c : s) {
            switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); out += b; }
                else out += char(c);
            }
        }
        out += '"';
    }
};

// Raise RLIMIT_NOFILE soft limit to the hard limit; returns the new soft limit.
inline rlim_t raise_nofile() {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

// VmRSS / VmHWM of this process in kB.
inline void self_rss_kb(long& rss, long& hwm) {
    rss = hwm = 0;
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "VmRSS:", 6)) rss = strtol(line + 6, nullptr, 10);
        else if (!strncmp(line, "VmHWM:", 6)) hwm = strtol(line + 6, nullptr, 10);
    }
    fclose(f);
}

inline double tv_s(const struct timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; }

inline std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t b = 0;
    while (b <= s.size()) {
        size_t e = s.find(sep, b);
        if (e == std::string::npos) e = s.size();
        if (e > b) out.push_back(s.substr(b, e - b));
        b = e + 1;
    }
    return out;
}

[[noreturn]] inline void die(const char* fmt, const char* a = "", const char* b = "") {
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    exit(2);
}

inline double parse_double(const char* opt, const char* v) {
    char* end = nullptr;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end) die("bad value for %s: %s", opt, v);
    return d;
}
inline long long parse_ll(const char* opt, const char* v) {
    char* end = nullptr;
    errno = 0;
    long long d = strtoll(v, &end, 10);
    if (errno || end == v || *end) die("bad value for %s: %s", opt, v);
    return d;
}

}  // namespace bench
