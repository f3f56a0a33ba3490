// The simulated world around the real engine: tables, producers, the
// commit ring, the row source, the sockets and the clients. Deterministic
// for a seed. Used by sim.cpp (seeded runs) and fuzz_engine.cpp (libFuzzer).
#pragma once
#include "core/cursor.hpp"
#include "core/outqueue.hpp"
#include "engine/engine.hpp"
#include "settings/configs.hpp"

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sim {

using namespace pgbs;

// The decisions of one run: a seeded generator, or the bytes of a fuzz input.
class Choices {
public:
  virtual ~Choices() = default;
  virtual uint32_t next() = 0;
  virtual bool exhausted() const { return false; }
  uint32_t below(uint32_t n) { return n ? next() % n : 0; }
  bool chance(uint32_t percent) { return below(100) < percent; }
};

class SeededChoices : public Choices {
public:
  explicit SeededChoices(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ULL + 1) {}
  uint32_t next() override {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return (uint32_t)(s_ >> 16);
  }

private:
  uint64_t s_;
};

class BytesChoices : public Choices {
public:
  BytesChoices(const uint8_t *d, size_t n) : d_(d), n_(n) {}
  uint32_t next() override { return i_ < n_ ? d_[i_++] : 0; }
  bool exhausted() const override { return i_ >= n_; }

private:
  const uint8_t *d_;
  size_t n_, i_ = 0;
};

struct SimStream {
  int64_t id;
  std::string name;
  int64_t next_id = 0;
  std::map<int64_t, engine::Row> table; // committed durable rows still there
  int64_t max_committed = 0;
  uint64_t ephemeral_seq = 0;
  int64_t retention_floor = 0;
  std::set<int64_t> committed, aborted, deleted, retained_away, ephemeral;
  std::set<int64_t> ephemeral_lost;      // lost in the ring (lap, overrun)
  std::map<int64_t, uint64_t> commit_no; // commit order of every committed id
};

struct Pending {
  int stream;
  int64_t id;
  bool ephemeral;
};

struct Tx {
  std::vector<Pending> rows;
  std::map<int, int64_t> floors; // stream -> floor
  bool too_large = false;        // skips the ring (overrun)
};

struct SimConn;

struct Client {
  int index = 0;
  std::vector<int> streams; // indices into World::streams
  std::string subscriber;
  bool gem = false; // on the gem's route: one data line per event (Subscribe::gem)
  SimConn *conn = nullptr;
  int mode = 0; // 0 fast, 1 slow, 2 stalled
  bool started = false;
  std::string last_token;                     // of the last data frame received (or the since_id)
  std::vector<cursor::StreamPosition> before; // per stream: covered by the first since_id
  std::vector<std::vector<int64_t>> got;      // per stream, in arrival order
  std::vector<std::set<int64_t>> got_set;
  std::vector<std::set<int64_t>> noticed_deleted;
  std::vector<bool> retention_notice, ephemeral_notice;
  std::vector<int64_t> retention_upto; // a retention notice said everything up to here is gone
  // Ephemeral ids a token claimed before the notice that explains them came
  // (a loss is known a round after the ring lost it): checked at the end.
  std::vector<std::set<int64_t>> ephemeral_claimed;
  std::string buf;       // bytes read, not yet a whole frame
  bool dupes_ok = false; // has resumed from a stored subscriber cursor (at least once)
};

struct SimConn {
  uint64_t id;
  OutQueue queue;
  Client *client;
  uint64_t written = 0;
  bool closed = false;
  SimConn(uint64_t id_, const engine::Config &c, Client *cl)
      : id(id_), queue(c.queue_max_events, c.queue_max_bytes, c.overflow_policy), client(cl) {}
};

class World;

class Source : public engine::RowSource {
public:
  explicit Source(World &w) : w_(w) {}
  bool load_catalog(const engine::CatalogFilter &which,
                    std::vector<engine::StreamInfo> *out) override;
  bool rows_by_id(const engine::StreamInfo &s, const std::vector<int64_t> &ids, size_t max_bytes,
                  std::vector<engine::Row> *out, int64_t *read_upto) override;
  bool rows_after(const engine::StreamInfo &s, int64_t after, int64_t limit, size_t max_bytes,
                  std::vector<engine::Row> *out) override;
  bool max_id(const engine::StreamInfo &s, int64_t *id) override;
  bool nth_newest(const engine::StreamInfo &s, int64_t n, int64_t *id) override;
  bool retention_floor(const engine::StreamInfo &s, int64_t *floor) override;
  bool stored_cursors(const std::string &subscriber, const std::vector<std::string> &streams,
                      std::vector<engine::StoredCursor> *out) override;
  bool store_cursors(const std::vector<engine::StoredCursor> &cursors) override;
  bool apply_retention(const engine::StreamInfo &s, int batch, int64_t *removed,
                       int64_t *floor) override;
  bool store_history(const std::vector<engine::HistoryRow> &) override { return ok(-1); }
  bool default_retention_streams(int64_t, int64_t, std::vector<int64_t> *) override {
    return ok(-1);
  }
  bool hook(const engine::StreamInfo &) override { return ok(-1); }
  bool prune_history(int64_t) override { return ok(-1); }

private:
  bool ok(int64_t stream_id);
  World &w_;
};

class Sink : public engine::FrameSink {
public:
  explicit Sink(World &w) : w_(w) {}
  void reject(uint64_t conn_id, int status, const std::string &reason) override;
  engine::SinkRef open(uint64_t conn_id, std::string preamble,
                       const std::string &start_id) override;
  size_t queued_events(engine::SinkRef ref) const override;
  size_t queued_bytes(engine::SinkRef ref) const override;
  bool backed_up(engine::SinkRef ref) const override;
  OutQueue::PushResult push(engine::SinkRef ref, OutFrame frame) override;
  uint64_t written(engine::SinkRef ref) const override;
  void close(engine::SinkRef ref, const std::string &reason) override;
  void release(engine::SinkRef ref) override;

private:
  World &w_;
};

class Obs : public engine::Observer {
public:
  explicit Obs(World &w) : w_(w) {}
  // A stream's shared-memory entry: held while the engine has it awake;
  // an unheld one may be reused (World::evict_entries), which loses its
  // committed maximum and ephemeral count.
  void *stream_handle(int64_t id, int64_t table_max) override;
  void release_stream(void *stream) override;
  bool holds(int64_t id) const { return held_.count(id) != 0; }
  uint64_t ephemeral_seq(void *stream) override;
  void stream_figures(void *, const engine::StreamDelta &) override {}
  void subscribers(void *, int) override {}
  void watched(void *, bool) override {}
  void wake(void *stream, bool on) override;
  bool wakes(void *stream) const { return woken_.count(stream) != 0; }
  void horizon(void *, int64_t) override {}
  void retention_removed(int64_t, void *, int64_t) override {}
  void diagnostic(uint64_t, const char *, const std::string &, const std::string &) override {}

private:
  World &w_;
  std::set<int64_t> held_;
  std::set<void *> woken_; // the engine asked producers to wake it for these
};

class World {
public:
  explicit World(Choices &ch);
  ~World();
  // Runs `steps` random steps, then settles everything and checks completeness.
  // Returns "" or the first invariant broken.
  std::string run(int steps);

  // State the interfaces read.
  Choices &ch;
  engine::Config cfg = settings::engine_config(settings::Settings{}, false); // the defaults
  std::vector<SimStream> streams;
  std::map<uint64_t, std::unique_ptr<SimConn>> conns;                // by conn id, until released
  std::set<int64_t> locked;                                          // streams whose reads fail
  uint32_t fail_percent = 0;                                         // of any read
  std::map<std::pair<std::string, std::string>, std::string> stored; // subscriber cursors
  std::string error;
  bool trace = false; // SIM_TRACE: print every step
  void fail(const std::string &what);
  void log(const std::string &what) const {
    if (trace)
      printf("  [%d] %s\n", steps_, what.c_str());
  }
  int rejected = 0;

private:
  struct Event {
    int stream;
    int64_t id;
    bool ephemeral;
    uint64_t seq;
    bool aborted = false; // an Aborted record: the id was rolled back
  };
  void step();
  void begin_tx();
  void end_tx(bool commit);
  void worker_round(bool full);
  void connect(Client &c, bool fresh);
  void read(Client &c, size_t budget);
  void frame(Client &c, const std::string &text);
  void check_token(Client &c, const std::string &token, const char *what);
  void check_bounds();
  void restart();
  void evict_entries();
  void settle();
  void check_complete();
  int stream_by_epoch(int64_t epoch) const;

  std::unique_ptr<Source> source_;
  std::unique_ptr<Sink> sink_;
  Obs obs_{*this};
  std::unique_ptr<engine::Engine> engine_;
  std::vector<Tx> inflight_;
  std::vector<Event> ring_;
  size_t ring_read_ = 0;
  size_t ring_cap_ = 8;
  bool overrun_ = false;
  std::vector<Client> clients_;
  uint64_t next_conn_ = 1;
  int steps_ = 0;
  size_t max_row_ = 0;
  uint64_t commits_ = 0;
  int64_t now_us_ = 1000;
};

// The stream of the world with this catalog id (nullptr when none).
SimStream *by_id(World &w, int64_t id);

} // namespace sim
