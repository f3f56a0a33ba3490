// What the delivery engine needs from the outside, as three small
// interfaces (docs/ARCHITECTURE.md, "The engine"): a row source (every SQL
// statement the worker runs), a frame sink (the HTTP layer's per-connection
// queues) and an observer (figures and diagnostics in shared memory). The
// worker implements them over SPI, libmicrohttpd and shared memory; the
// simulator implements them in memory. Plain C++, no PostgreSQL.
#pragma once
#include "core/no_postgres.hpp"
#include "core/outqueue.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pgbs::engine {

// One message of a stream: a queue (or archive) row, or an ephemeral broadcast.
struct Row {
  int64_t msg_id = 0;
  std::string data;
  std::optional<std::string> event, visible_to;
  int64_t enqueued_us = 0;
  int64_t commit_us = 0;  // from the ring; 0 for rows read from the table
  bool ephemeral = false; // no table row: cannot be paged from the table
  uint64_t exclude = 0;   // broadcast(exclude => ...): this connection does not get it
  // The row exists but could not be read (a data error in its own cells,
  // e.g. a corrupt value): skipped with a gap notice, never retried forever.
  bool unreadable = false;
};

// A stream of the catalog.
struct StreamInfo {
  int64_t id = 0; // catalog id, also the stream's epoch
  std::string name;
  bool is_public = true;
  bool has_retention = false;
  int64_t retention_floor = 0; // highest msg_id removed by retention
  int64_t max_committed = 0;   // highest msg_id in the queue and its archive at load
  bool hooked = true;          // capture triggers in place (auto-attached: at first subscription)
  std::string queue_schema, queue_table; // which stream a gem name opens (names::is_gem_queue)
};

// Which streams of the catalog a load reads: all, or only these.
struct CatalogFilter {
  std::vector<int64_t> ids;
  std::string name;
  std::vector<std::string> names; // streams awaited by pending subscriptions
  bool all() const { return ids.empty() && name.empty() && names.empty(); }
};

// A subscriber's stored position of one stream.
struct StoredCursor {
  std::string subscriber, stream, cursor;
};

struct HistoryRow {
  std::string stream, event;
  double duration_ms;
  int64_t fanout;
};

// Every read and write of the tables. Each call either succeeds or returns
// false (lock timeout, statement timeout, cancel, any error): the engine then
// counts nothing, keeps its positions and tries again later. Calls are
// bounded (the limits are arguments) and never wait long on a lock.
class RowSource {
public:
  virtual ~RowSource() = default;
  // The catalog (streams whose queue table exists), or the part the filter
  // names; false on failure (no extension: true, nothing).
  virtual bool load_catalog(const CatalogFilter &which, std::vector<StreamInfo> *out) = 0;
  // The rows with these ids, ascending (missing ones are simply absent).
  // A read holds about max_bytes of payload (Row::data): it stops after the
  // row that reaches it, though not before ids.front() (a read always
  // makes progress). *read_upto: the highest id the read looked at (ids
  // above it are still to read), INT64_MAX when it looked at every one.
  virtual bool rows_by_id(const StreamInfo &s, const std::vector<int64_t> &ids, size_t max_bytes,
                          std::vector<Row> *out, int64_t *read_upto) = 0;
  // Up to `limit` rows with msg_id > after, ascending, and no more after
  // the row whose payload brings them to max_bytes.
  virtual bool rows_after(const StreamInfo &s, int64_t after, int64_t limit, size_t max_bytes,
                          std::vector<Row> *out) = 0;
  // The highest msg_id in the queue and its archive (0 when empty).
  virtual bool max_id(const StreamInfo &s, int64_t *id) = 0;
  // The msg_id of the n-th newest row (0 when there are fewer rows).
  virtual bool nth_newest(const StreamInfo &s, int64_t n, int64_t *id) = 0;
  // The stream's retention floor as stored by whichever worker applied retention.
  virtual bool retention_floor(const StreamInfo &s, int64_t *floor) = 0;
  virtual bool stored_cursors(const std::string &subscriber,
                              const std::vector<std::string> &streams,
                              std::vector<StoredCursor> *out) = 0;
  virtual bool store_cursors(const std::vector<StoredCursor> &cursors) = 0;
  // Removes up to `batch` rows past retention; *removed, *floor (new retention floor).
  virtual bool apply_retention(const StreamInfo &s, int batch, int64_t *removed,
                               int64_t *floor) = 0;
  // Streams under the default retention (never configured), ids above
  // `after`, ascending, at most `limit`.
  virtual bool default_retention_streams(int64_t after, int64_t limit,
                                         std::vector<int64_t> *ids) = 0;
  // Puts the capture triggers on an auto-attached stream's queue.
  virtual bool hook(const StreamInfo &s) = 0;
  virtual bool store_history(const std::vector<HistoryRow> &rows) = 0;
  virtual bool prune_history(int64_t max_age_s) = 0;
};

// A connection's handle on the sink side: given by open(), valid until release().
using SinkRef = void *;

// The HTTP layer's side of a connection.
class FrameSink {
public:
  virtual ~FrameSink() = default;
  virtual void reject(uint64_t conn_id, int status, const std::string &reason) = 0;
  // The request cannot be served just now (a transient database error: a
  // table locked, a read cancelled). The HTTP layer answers with a stream
  // that tells the client to come back soon: a browser's EventSource gives
  // up for good on an error status.
  virtual void retry_later(uint64_t conn_id, const std::string &reason) {
    reject(conn_id, 503, reason);
  }
  // Answers 200 and queues the preamble; `start_id` is the cursor the
  // connection started from (what an overflow notice names before any frame
  // was written). nullptr when the request is gone.
  virtual SinkRef open(uint64_t conn_id, std::string preamble, const std::string &start_id) = 0;
  virtual size_t queued_events(SinkRef ref) const = 0;
  virtual size_t queued_bytes(SinkRef ref) const = 0;
  // The socket refused part of a write and the queue already holds what
  // refills it once: more frames would only wait. A lagging connection then
  // takes none (it pages them when the socket drains), so connections that
  // cannot make progress cost nothing per event.
  virtual bool backed_up(SinkRef) const { return false; }
  // Queues a frame; the queue's overflow policy applies (the engine checks
  // room first for frames that must not be dropped).
  virtual OutQueue::PushResult push(SinkRef ref, OutFrame frame) = 0;
  // Data frames written to the socket so far.
  virtual uint64_t written(SinkRef ref) const = 0;
  // Ends the stream after what is queued (reason reported back as closed).
  virtual void close(SinkRef ref, const std::string &reason) = 0;
  // The engine is done with the handle (after the connection closed).
  virtual void release(SinkRef ref) = 0;
};

// Where the engine reports what it did. A stream's handle comes from
// stream_handle() once per stream and is passed back with each figure.
struct StreamDelta {
  uint64_t queued = 0, overflow_dropped = 0, bytes_queued = 0, failed = 0;
  int64_t latency_us = -1; // one commit-to-queue sample, or -1
};

class Observer {
public:
  virtual ~Observer() = default;
  // Held until release_stream(); `table_max` (the tables' highest msg_id)
  // raises the stream's shared committed maximum. nullptr: shared memory
  // has no room.
  virtual void *stream_handle(int64_t stream_id, int64_t table_max) = 0;
  virtual void release_stream(void *stream) = 0;
  // Few handles are left: streams without connections release theirs now.
  virtual bool streams_short() { return false; }
  // How many ephemeral broadcasts the stream's producers have committed
  // (numbered in ring order; see shmem/ring_record.hpp).
  virtual uint64_t ephemeral_seq(void *stream) = 0;
  // A count that had numbered ephemeral broadcasts was lost since the node
  // started (an entry reused): a stream's count no longer says whether it
  // had any before this process.
  virtual bool ephemeral_forgotten() { return false; }
  virtual void stream_figures(void *stream, const StreamDelta &d) = 0;
  virtual void subscribers(void *stream, int delta) = 0;
  // This process has (or no longer has) a connection on the stream: its
  // producers copy the rows' payloads into the ring.
  virtual void watched(void *stream, bool on) = 0;
  // Producers wake this process for the stream's commits (on), or leave
  // them in the ring until it wakes for something else (off: every
  // subscription of the stream here pages). After `on` the process drains
  // the ring once more: commits that came before it missed the wake.
  virtual void wake(void *stream, bool on) = 0;
  virtual void horizon(void *stream, int64_t horizon) = 0;
  // Rows retention removed from a stream's table; `stream` is its handle
  // when this process holds one, else nullptr (counted all the same).
  virtual void retention_removed(int64_t stream_id, void *stream, int64_t rows) = 0;
  virtual void diagnostic(uint64_t conn_id, const char *event, const std::string &stream,
                          const std::string &detail) = 0;
  // A subscription of this process waits (on) or no longer waits (off) for
  // a stream that does not exist yet, so that its creator hooks the queue at
  // once; false when `on` found no room (the subscription is refused).
  virtual bool awaited(const std::string & /*name*/, bool /*on*/) { return true; }
};

} // namespace pgbs::engine
