// SqlRowSource: the worker's SQL, each call a short transaction that gives
// up quickly on a lock instead of stalling the event loop.
#include "worker/sql_source.hpp"
#include "core/auth.hpp"
#include "core/sse.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"

namespace pgbs::worker {
namespace {

// A locked table is given up on after this; the engine retries with backoff
// (10 ms doubling to 1 s), so other streams, heartbeats and accepts go on.
constexpr const char *kLockTimeout = "20ms";
// No worker statement should run longer; a slower one is cancelled and retried.
constexpr const char *kStatementTimeout = "2s";

int64_t to_i64(const std::optional<std::string> &s) { return s ? std::stoll(*s) : 0; }

// Runs fn(tx) in its own transaction with the timeouts above; false (and a
// warning) when anything in it failed: nothing of it is used. With `vanished`
// set, a table that no longer exists fails quietly and sets *vanished.
template <typename F> bool run(const char *what, F &&fn, bool *vanished = nullptr) {
  try {
    pg::SpiTx tx;
    tx.query("SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, "
             "true)",
             {pg::Arg::txt(kLockTimeout), pg::Arg::txt(kStatementTimeout)});
    fn(tx);
    tx.commit();
    return true;
  } catch (const pg::Error &e) {
    if (vanished && e.sqlerrcode() == ERRCODE_UNDEFINED_TABLE) {
      *vanished = true;
      return false;
    }
    pg::warn(std::string(what) + " failed (retried later): " + e.what());
    return false;
  } catch (const std::exception &e) { // e.g. std::stoll on a malformed value
    pg::warn(std::string(what) + " failed (retried later): " + e.what());
    return false;
  }
}

} // namespace

// A stream dropped between the catalog's read and its maximum's (their own
// transactions) is not an error: the catalog is read again, and no longer
// lists it (at most twice; a third time warns).
bool SqlRowSource::load_catalog(const engine::CatalogFilter &which,
                                std::vector<engine::StreamInfo> *out) {
  for (int attempt = 0;; attempt++) {
    bool vanished = false;
    const bool ok = load_catalog_once(which, out, attempt < 2 ? &vanished : nullptr);
    if (ok || !vanished)
      return ok;
  }
}

bool SqlRowSource::load_catalog_once(const engine::CatalogFilter &which,
                                     std::vector<engine::StreamInfo> *out, bool *vanished) {
  std::unordered_map<int64_t, std::string> sqls, maxes;
  bool present = false;
  pg::Table t;
  const bool ok = run("catalog read", [&](pg::SpiTx &tx) {
    // (a 0.1.0 catalog, library updated before ALTER EXTENSION, has no
    // auto_attached or hooked column)
    pg::Table ext = tx.query(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attname = 'hooked' AND NOT attisdropped "
        "               AND attrelid = to_regclass('pgbus_stream.streams')) "
        "FROM pg_extension WHERE extname = 'pgbus_stream'");
    present = ext.rows() > 0;
    if (!present)
      return;
    const bool gem_columns = ext.at(0, 0).value_or("f") == "t";
    std::string where, only;
    std::vector<pg::Arg> args;
    if (!which.ids.empty()) {
      where = " AND s.id = ANY($1)";
      args.push_back(pg::Arg::int8_array(which.ids));
    } else if (!which.name.empty()) {
      where = " AND s.name = $1";
      args.push_back(pg::Arg::txt(which.name));
    } else if (!which.names.empty()) {
      std::string list = "{";
      for (size_t i = 0; i < which.names.size(); i++)
        list += (i ? ",\"" : "\"") + sse::json_escape(which.names[i]) + "\"";
      where = " AND s.name = ANY($1::text[])";
      args.push_back(pg::Arg::txt(list + "}"));
    } else if (gem_columns) {
      // A private auto-attached queue nobody subscribed to yet has no
      // capture triggers: nothing of it reaches the ring, an anonymous
      // request may not read it, and an authorised subscription loads it by
      // name. Left out, a database with many such queues (one per record for
      // the pgbus gem) costs a full load neither a read of each queue's
      // maximum nor a shared-memory entry per queue. Streams read before
      // stay in, so that a dropped one is noticed.
      // (in a CASE: the queue's lookup runs only for the rows kept)
      only = "(NOT s.auto_attached OR s.hooked OR s.public OR s.id = ANY($1))";
      std::vector<int64_t> known;
      known.reserve(rows_sql_.size());
      for (const auto &kv : rows_sql_)
        known.push_back(kv.first);
      args.push_back(pg::Arg::int8_array(known));
    }
    const std::string queue_exists =
        "to_regclass(format('%I.%I', s.queue_schema, s.queue_table)) IS NOT NULL";
    // The committed maximum of each queue (and archive) seeds the horizon.
    t = tx.query(
        "SELECT s.id, s.name, s.public, pgbus_stream._rows_sql(s), s.retention_floor, "
        "       (s.retention IS NOT NULL OR s.retention_max IS NOT NULL), "
        "       format('SELECT greatest((SELECT max(msg_id) FROM %I.%I), %s)', s.queue_schema, "
        "              s.queue_table, "
        "              CASE WHEN s.archive_table IS NOT NULL AND "
        "                        to_regclass(format('%I.%I', s.queue_schema, s.archive_table)) "
        "                        IS NOT NULL "
        "                   THEN format('(SELECT max(msg_id) FROM %I.%I)', s.queue_schema, "
        "                               s.archive_table) "
        "                   ELSE '0' END), "
        // hooked through to_jsonb: a 0.1.0 catalog (library updated, ALTER
        // EXTENSION not run yet) has no such column and must still be served.
        "       coalesce((to_jsonb(s) ->> 'hooked')::boolean, true) "
        "FROM pgbus_stream.streams s "
        "WHERE " +
            (only.empty() ? queue_exists : "CASE WHEN " + only + " THEN " + queue_exists + " END") +
            where + " ORDER BY s.id",
        args);
  });
  if (!ok || !present) {
    out->clear(); // no extension in this database: no streams
    if (ok && which.all()) {
      rows_sql_.clear();
      max_sql_.clear();
    }
    return ok;
  }
  // Each maximum locks its tables until commit: a few hundred streams per
  // transaction, so that a database with many queues stays within the lock table.
  for (size_t from = 0; from < t.rows(); from += 200) {
    const bool part_ok = run("catalog read", [&](pg::SpiTx &tx) {
      for (size_t r = from; r < t.rows() && r < from + 200; r++) {
        engine::StreamInfo si;
        si.id = to_i64(t.at(r, 0));
        si.name = t.at(r, 1).value_or("");
        si.is_public = t.at(r, 2).value_or("t") == "t";
        sqls[si.id] = t.at(r, 3).value_or("");
        si.retention_floor = to_i64(t.at(r, 4));
        si.has_retention = t.at(r, 5).value_or("f") == "t";
        si.hooked = t.at(r, 7).value_or("t") == "t";
        maxes[si.id] = t.at(r, 6).value_or("SELECT 0");
        pg::Table m = tx.query(maxes[si.id]);
        si.max_committed = m.rows() ? to_i64(m.at(0, 0)) : 0;
        out->push_back(std::move(si));
      }
    }, vanished);
    if (!part_ok) {
      out->clear();
      return false;
    }
  }
  if (which.all()) {
    rows_sql_.swap(sqls);
    max_sql_.swap(maxes);
  } else {
    for (auto &[id, q] : sqls)
      rows_sql_[id] = q;
    for (auto &[id, q] : maxes)
      max_sql_[id] = q;
  }
  return true;
}

bool SqlRowSource::rows(const engine::StreamInfo &s, const std::string &where,
                        const std::vector<int64_t> *ids, int64_t after, int64_t limit,
                        std::vector<engine::Row> *out) {
  auto it = rows_sql_.find(s.id);
  if (it == rows_sql_.end())
    return false;
  return run("row read", [&](pg::SpiTx &tx) {
    std::vector<pg::Arg> args;
    if (ids)
      args.push_back(pg::Arg::int8_array(*ids));
    else {
      args.push_back(pg::Arg::int8(after));
      args.push_back(pg::Arg::int8(limit));
    }
    pg::Table t = tx.query(it->second + " " + where, args);
    out->reserve(out->size() + t.rows());
    for (size_t r = 0; r < t.rows(); r++) {
      engine::Row row;
      row.msg_id = to_i64(t.at(r, 0));
      row.data = t.at(r, 1).value_or("");
      row.event = t.at(r, 2);
      row.visible_to = t.at(r, 3);
      row.enqueued_us = to_i64(t.at(r, 4));
      if (t.ncols > 5 && t.at(r, 5))
        auth::parse_connection_id(*t.at(r, 5), &row.exclude);
      out->push_back(std::move(row));
    }
  });
}

bool SqlRowSource::rows_by_id(const engine::StreamInfo &s, const std::vector<int64_t> &ids,
                              std::vector<engine::Row> *out) {
  return rows(s, "WHERE msg_id = ANY($1)", &ids, 0, 0, out);
}

bool SqlRowSource::rows_after(const engine::StreamInfo &s, int64_t after, int64_t limit,
                              std::vector<engine::Row> *out) {
  return rows(s, "WHERE msg_id > $1 ORDER BY msg_id LIMIT $2", nullptr, after, limit, out);
}

bool SqlRowSource::max_id(const engine::StreamInfo &s, int64_t *id) {
  auto it = max_sql_.find(s.id);
  if (it == max_sql_.end())
    return false;
  return run("maximum read", [&](pg::SpiTx &tx) {
    pg::Table t = tx.query(it->second);
    *id = t.rows() ? to_i64(t.at(0, 0)) : 0;
  });
}

bool SqlRowSource::nth_newest(const engine::StreamInfo &s, int64_t n, int64_t *id) {
  auto it = rows_sql_.find(s.id);
  if (it == rows_sql_.end())
    return false;
  return run("backlog read", [&](pg::SpiTx &tx) {
    pg::Table t = tx.query("SELECT min(msg_id), count(*) FROM (" + it->second +
                               " WHERE msg_id > $1 ORDER BY msg_id DESC LIMIT $2) x",
                           {pg::Arg::int8(0), pg::Arg::int8(n)});
    *id = t.rows() && to_i64(t.at(0, 1)) > 0 ? to_i64(t.at(0, 0)) : 0;
  });
}

bool SqlRowSource::retention_floor(const engine::StreamInfo &s, int64_t *floor) {
  return run("retention floor read", [&](pg::SpiTx &tx) {
    pg::Table t = tx.query("SELECT retention_floor FROM pgbus_stream.streams WHERE id = $1",
                           {pg::Arg::int8(s.id)});
    *floor = t.rows() ? to_i64(t.at(0, 0)) : 0;
  });
}

bool SqlRowSource::stored_cursors(const std::string &subscriber,
                                  const std::vector<std::string> &streams,
                                  std::vector<engine::StoredCursor> *out) {
  std::string list = "{";
  for (size_t i = 0; i < streams.size(); i++)
    list += (i ? "," : "") + std::string("\"") + sse::json_escape(streams[i]) + "\"";
  list += "}";
  return run("subscriber cursor read", [&](pg::SpiTx &tx) {
    pg::Table t = tx.query("SELECT stream, cursor FROM pgbus_stream.subscribers WHERE id = $1 AND "
                           "stream = ANY($2::text[])",
                           {pg::Arg::txt(subscriber), pg::Arg::txt(list)});
    for (size_t r = 0; r < t.rows(); r++)
      out->push_back({subscriber, t.at(r, 0).value_or(""), t.at(r, 1).value_or("")});
  });
}

bool SqlRowSource::store_cursors(const std::vector<engine::StoredCursor> &cursors) {
  std::string json = "[";
  for (const engine::StoredCursor &c : cursors) {
    if (json.size() > 1)
      json += ',';
    json += "{\"id\":\"" + sse::json_escape(c.subscriber) + "\",\"stream\":\"" +
            sse::json_escape(c.stream) + "\",\"cursor\":\"" + sse::json_escape(c.cursor) + "\"}";
  }
  json += "]";
  return run("subscriber cursor store", [&](pg::SpiTx &tx) {
    tx.query("INSERT INTO pgbus_stream.subscribers AS s (id, stream, cursor, updated_at) "
             "SELECT id, stream, cursor, now() FROM jsonb_to_recordset($1::jsonb) "
             "AS r(id text, stream text, cursor text) "
             "ON CONFLICT (id, stream) DO UPDATE SET cursor = excluded.cursor, updated_at = "
             "excluded.updated_at",
             {pg::Arg::txt(json)}, false);
  });
}

bool SqlRowSource::apply_retention(const engine::StreamInfo &s, int batch, int64_t *removed,
                                   int64_t *floor) {
  return run("retention", [&](pg::SpiTx &tx) {
    pg::Table t = tx.query("SELECT removed, floor FROM pgbus_stream._apply_retention($1, $2::int)",
                           {pg::Arg::int8(s.id), pg::Arg::int8(batch)}, false);
    *removed = t.rows() ? to_i64(t.at(0, 0)) : 0;
    *floor = t.rows() ? to_i64(t.at(0, 1)) : 0;
  });
}

bool SqlRowSource::default_retention_streams(int64_t after, int64_t limit,
                                             std::vector<int64_t> *ids) {
  return run("default retention list", [&](pg::SpiTx &tx) {
    pg::Table t =
        tx.query("SELECT id FROM pgbus_stream.streams s "
                 "WHERE NOT coalesce((to_jsonb(s) ->> 'retention_set')::boolean, true) "
                 "AND retention IS NULL AND retention_max IS NULL AND id > $1 ORDER BY id LIMIT $2",
                 {pg::Arg::int8(after), pg::Arg::int8(limit)});
    for (size_t r = 0; r < t.rows(); r++)
      ids->push_back(to_i64(t.at(r, 0)));
  });
}

bool SqlRowSource::hook(const engine::StreamInfo &s) {
  return run("hooking the queue", [&](pg::SpiTx &tx) {
    // CREATE TRIGGER waits for the inserts in flight: longer than a read may.
    tx.query("SELECT set_config('lock_timeout', '2s', true)");
    tx.query("SELECT pgbus_stream._hook_triggers($1)", {pg::Arg::int8(s.id)}, false);
  });
}

bool SqlRowSource::store_history(const std::vector<engine::HistoryRow> &rows) {
  std::string json = "[";
  char num[64];
  for (const engine::HistoryRow &h : rows) {
    if (json.size() > 1)
      json += ',';
    snprintf(num, sizeof(num), "%.3f", h.duration_ms);
    json += "{\"s\":\"" + sse::json_escape(h.stream) + "\",\"e\":\"" + h.event + "\",\"d\":" + num +
            ",\"f\":" + std::to_string(h.fanout) + "}";
  }
  json += "]";
  return run("history store", [&](pg::SpiTx &tx) {
    tx.query(
        "INSERT INTO pgbus_stream.stream_stats (stream_name, event_type, duration_ms, fanout) "
        "SELECT s, e, d, f FROM jsonb_to_recordset($1::jsonb) AS r(s text, e text, d float8, f "
        "int)",
        {pg::Arg::txt(json)}, false);
  });
}

bool SqlRowSource::prune_history(int64_t max_age_s) {
  return run("history prune", [&](pg::SpiTx &tx) {
    tx.query("DELETE FROM pgbus_stream.stream_stats WHERE id IN (SELECT id FROM "
             "pgbus_stream.stream_stats WHERE created_at < now() - make_interval(secs => $1) "
             "ORDER BY id LIMIT 10000)",
             {pg::Arg::int8(max_age_s)}, false);
  });
}

bool SqlRowSource::probe() {
  // The catalog the worker serves from: /healthz also says 503 when the
  // extension's tables cannot be read (e.g. dropped).
  return run("database probe",
             [](pg::SpiTx &tx) { tx.query("SELECT 1 FROM pgbus_stream.streams LIMIT 1"); });
}

} // namespace pgbs::worker
