// The engine's row source over SPI: every SQL statement the worker runs.
// Each call is its own short transaction with a short lock_timeout and a
// statement_timeout, so a locked queue table costs the loop milliseconds,
// not the lock's duration; a failed call returns false and the engine tries
// again later (docs/ARCHITECTURE.md, "SQL on the event loop").
#pragma once
#include "engine/interfaces.hpp"
#include "pg/spi.hpp"

#include <set>
#include <string>
#include <unordered_map>

namespace pgbs::worker {

class SqlRowSource : public engine::RowSource {
public:
  bool load_catalog(const engine::CatalogFilter &which,
                    std::vector<engine::StreamInfo> *out) override;

private:
  bool load_catalog_once(const engine::CatalogFilter &which, std::vector<engine::StreamInfo> *out,
                         bool *vanished);

public:
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
  bool default_retention_streams(int64_t after, int64_t limit, std::vector<int64_t> *ids) override;
  bool hook(const engine::StreamInfo &s) override;
  bool store_history(const std::vector<engine::HistoryRow> &rows) override;
  bool prune_history(int64_t max_age_s) override;
  // /healthz: can this worker still run a query?
  bool probe();
  // The app's table history rows go to (pgbus_stream.stats_table; "" =
  // pgbus_stream.stream_stats).
  void set_stats_table(const std::string &name) { stats_table_ = name; }

private:
  bool rows(const engine::StreamInfo &s, const std::string &where, const std::vector<int64_t> *ids,
            int64_t after, int64_t limit, size_t max_bytes, std::vector<engine::Row> *out,
            int64_t *read_upto);
  bool rows_one_by_one(const engine::StreamInfo &s, const std::string &sql,
                       const std::string &where, const std::vector<pg::Arg> &args,
                       std::vector<engine::Row> *out);
  // (stream, msg_id) of unreadable rows already warned about (bounded)
  std::set<std::pair<int64_t, int64_t>> unreadable_warned_;
  // SELECT msg_id, data, event, visible_to, enqueued_us FROM <queue ∪ archive> m, per stream
  std::unordered_map<int64_t, std::string> rows_sql_;
  // SELECT greatest(max(msg_id) of the queue, of the archive), per stream
  std::unordered_map<int64_t, std::string> max_sql_;
  // The tables those two read (the queue, and its archive when there is
  // one), per stream: each statement runs as their owner.
  std::unordered_map<int64_t, std::vector<pg::TableName>> tables_;
  std::string stats_table_;
  std::string last_refusal_; // why stats_table_ is not written, as last warned
  int64_t last_refusal_at_ = 0;
  bool app_table(pg::SpiTx &tx, std::string *target, bool *utc);
  bool store_app_history(const std::string &json);
  bool prune_app_history(int64_t max_age_s);
};

} // namespace pgbs::worker
