// SqlRowSource: the worker's SQL, each call a short transaction that gives
// up quickly on a lock instead of stalling the event loop. Statements on a
// queue or archive table run as its owner, after a check that it can be
// taken as a queue (docs/ARCHITECTURE.md, "Whose rights").
#include "worker/sql_source.hpp"
#include "core/auth.hpp"
#include "core/sse.hpp"
#include "engine/row_decode.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"

#include <ctime>
#include <stdexcept>
#include <unordered_map>

namespace pgbs::worker {
namespace {

// A locked table is given up on after this; the engine retries with backoff
// (10 ms doubling to 1 s), so other streams, heartbeats and accepts go on.
constexpr const char *kLockTimeout = "20ms";
// No worker statement should run longer; a slower one is cancelled and retried.
constexpr const char *kStatementTimeout = "2s";

int64_t to_i64(const std::optional<std::string> &s) {
  int64_t v = 0;
  return s && engine::parse_i64(*s, &v) ? v : 0;
}

// An error that one row's cells can cause (a data exception, a corrupt or
// oversized value), as opposed to a lock, a timeout or a missing table.
bool row_data_error(int code) {
  return ERRCODE_TO_CATEGORY(code) == ERRCODE_DATA_EXCEPTION || code == ERRCODE_DATA_CORRUPTED ||
         code == ERRCODE_PROGRAM_LIMIT_EXCEEDED;
}

// A stream whose tables cannot be taken as a queue (a view, rules, the wrong
// columns, another owner): nothing is run on them.
struct Refused : std::runtime_error {
  Refused(int64_t id, const std::string &name, const std::string &why)
      : std::runtime_error(why), stream(id), name(name) {}
  int64_t stream;
  std::string name; // may be empty (a stream retention visits by id)
};

// The reason last logged for each refused stream: logged once, not at every
// retry, and again when it changes.
std::unordered_map<int64_t, std::string> &refusals() {
  static std::unordered_map<int64_t, std::string> said;
  return said;
}

void log_refusal(int64_t id, const std::string &name, const char *what, const std::string &why) {
  auto &said = refusals();
  auto it = said.find(id);
  if (it != said.end() && it->second == why)
    return;
  if (said.size() >= 10000) // bounded: at worst a reason is logged again
    said.clear();
  said[id] = why;
  pg::warn(std::string(what) + " of stream " +
           (name.empty() ? std::to_string(id) : "\"" + name + "\"") + " skipped: " + why);
}

// The owner of a stream's tables, locked and checked (pg::SpiTx::queue_owner):
// every statement on them runs as that role.
unsigned owner_of(pg::SpiTx &tx, const engine::StreamInfo &s,
                  const std::vector<pg::TableName> &tables, bool write) {
  std::string why;
  const unsigned owner = tx.queue_owner(tables, write, &why);
  if (owner == 0)
    throw Refused(s.id, s.name, why);
  refusals().erase(s.id);
  return owner;
}

// Runs fn(tx) in its own transaction with the timeouts above; false (and a
// warning) when anything in it failed: nothing of it is used. With
// data_error, a failure row_data_error() names is reported there instead of
// warned about (the caller reads row by row). With `vanished` set, a table
// that no longer exists fails quietly and sets *vanished.
template <typename F>
bool run(const char *what, F &&fn, bool *data_error = nullptr, bool *vanished = nullptr) {
  try {
    pg::SpiTx tx;
    tx.query("SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, "
             "true)",
             {pg::Arg::txt(kLockTimeout), pg::Arg::txt(kStatementTimeout)});
    fn(tx);
    tx.commit();
    return true;
  } catch (const Refused &e) {
    log_refusal(e.stream, e.name, what, e.what());
    return false;
  } catch (const pg::Error &e) {
    if (data_error && row_data_error(e.sqlerrcode())) {
      *data_error = true;
      return false;
    }
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
  std::unordered_map<int64_t, std::vector<pg::TableName>> tables;
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
        "       coalesce((to_jsonb(s) ->> 'hooked')::boolean, true), "
        // the tables the two statements above read (as _rows_sql() decides)
        "       s.queue_schema, s.queue_table, "
        "       CASE WHEN s.archive_table IS NOT NULL AND to_regclass(format('%I.%I', "
        "                 s.queue_schema, s.archive_table)) IS NOT NULL THEN s.archive_table END "
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
      tables_.clear();
    }
    return ok;
  }
  // Each maximum locks its tables until commit: a few hundred streams per
  // transaction, so that a database with many queues stays within the lock table.
  for (size_t from = 0; from < t.rows(); from += 200) {
    const bool part_ok = run(
        "catalog read",
        [&](pg::SpiTx &tx) {
          for (size_t r = from; r < t.rows() && r < from + 200; r++) {
            engine::StreamInfo si;
            si.id = to_i64(t.at(r, 0));
            si.name = t.at(r, 1).value_or("");
            si.is_public = t.at(r, 2).value_or("t") == "t";
            si.retention_floor = to_i64(t.at(r, 4));
            si.has_retention = t.at(r, 5).value_or("f") == "t";
            si.hooked = t.at(r, 7).value_or("t") == "t";
            si.queue_schema = t.at(r, 8).value_or("");
            si.queue_table = t.at(r, 9).value_or("");
            std::vector<pg::TableName> names{{t.at(r, 8).value_or(""), t.at(r, 9).value_or("")}};
            if (t.at(r, 10))
              names.push_back({names[0].schema, *t.at(r, 10)});
            // A stream whose tables are no queue (any more) is left out, with
            // one logged reason; nothing of it runs.
            std::string why;
            const unsigned owner = tx.queue_owner(names, false, &why);
            if (owner == 0) {
              log_refusal(si.id, si.name, "catalog read", why);
              continue;
            }
            refusals().erase(si.id);
            pg::Table m = tx.query(t.at(r, 6).value_or("SELECT 0"), {}, true, owner);
            si.max_committed = m.rows() ? to_i64(m.at(0, 0)) : 0;
            sqls[si.id] = t.at(r, 3).value_or("");
            maxes[si.id] = t.at(r, 6).value_or("SELECT 0");
            tables[si.id] = std::move(names);
            out->push_back(std::move(si));
          }
        },
        nullptr, vanished);
    if (!part_ok) {
      out->clear();
      return false;
    }
  }
  if (which.all()) {
    rows_sql_.swap(sqls);
    max_sql_.swap(maxes);
    tables_.swap(tables);
  } else {
    for (auto &[id, q] : sqls)
      rows_sql_[id] = q;
    for (auto &[id, q] : maxes)
      max_sql_[id] = q;
    for (auto &[id, names] : tables)
      tables_[id] = std::move(names);
  }
  return true;
}

bool SqlRowSource::rows(const engine::StreamInfo &s, const std::string &where,
                        const std::vector<int64_t> *ids, int64_t after, int64_t limit,
                        size_t max_bytes, std::vector<engine::Row> *out, int64_t *read_upto) {
  auto it = rows_sql_.find(s.id);
  auto names = tables_.find(s.id);
  if (it == rows_sql_.end() || names == tables_.end())
    return false;
  std::vector<pg::Arg> args;
  if (ids)
    args.push_back(pg::Arg::int8_array(*ids));
  else {
    args.push_back(pg::Arg::int8(after));
    args.push_back(pg::Arg::int8(limit));
  }
  // Rows are taken one at a time up to the byte budget (column 1 is the
  // payload), so a page of large rows is held once, not with all after it.
  pg::SpiTx::Until until;
  until.envelope_col = 1;
  until.max_bytes = std::max<size_t>(max_bytes, 1);
  until.max_rows = ids ? ids->size() + 1 : (size_t)std::max<int64_t>(limit, 1);
  until.cover_id = ids && !ids->empty() ? ids->front() : INT64_MIN;
  const size_t before = out->size();
  bool data_error = false;
  const bool ok = run(
      "row read",
      [&](pg::SpiTx &tx) {
        const unsigned owner = owner_of(tx, s, names->second, false);
        int64_t last = 0;
        bool cut = false;
        pg::Table t = tx.query_until(it->second + " " + where, args, owner, until, &last, &cut);
        *read_upto = cut ? last : INT64_MAX;
        out->reserve(out->size() + t.rows());
        for (size_t r = 0; r < t.rows(); r++) {
          engine::Row row;
          if (engine::decode_row_taking(&t.cells[r * t.ncols], t.ncols, &row))
            out->push_back(std::move(row));
        }
      },
      &data_error);
  if (ok || !data_error)
    return ok;
  out->resize(before);
  *read_upto = INT64_MAX;
  return rows_one_by_one(s, it->second, where, args, out);
}

// A read that failed on the data of some row: the ids alone (which no cell
// can fail), then each row on its own; a row that still fails for its data
// comes back unreadable (the engine skips it with a gap notice), warned
// about once per worker.
bool SqlRowSource::rows_one_by_one(const engine::StreamInfo &s, const std::string &sql,
                                   const std::string &where, const std::vector<pg::Arg> &args,
                                   std::vector<engine::Row> *out) {
  auto names = tables_.find(s.id);
  if (names == tables_.end())
    return false;
  std::vector<int64_t> ids;
  if (!run("row read (ids)", [&](pg::SpiTx &tx) {
        const unsigned owner = owner_of(tx, s, names->second, false);
        pg::Table t =
            tx.query("SELECT msg_id FROM (" + sql + " " + where + ") x", args, true, owner);
        for (size_t r = 0; r < t.rows(); r++)
          if (t.at(r, 0))
            ids.push_back(to_i64(t.at(r, 0)));
      }))
    return false;
  for (int64_t id : ids) {
    bool bad = false;
    std::string why;
    const bool ok = run(
        "row read",
        [&](pg::SpiTx &tx) {
          const unsigned owner = owner_of(tx, s, names->second, false);
          try {
            pg::SpiTx::Until all;
            all.envelope_col = 1;
            all.max_bytes = all.max_rows = SIZE_MAX;
            pg::Table t = tx.query_until(sql + " WHERE msg_id = $1", {pg::Arg::int8(id)}, owner,
                                         all, nullptr, nullptr);
            for (size_t r = 0; r < t.rows(); r++) {
              engine::Row row;
              if (engine::decode_row_taking(&t.cells[r * t.ncols], t.ncols, &row))
                out->push_back(std::move(row));
            }
          } catch (const pg::Error &e) {
            why = e.what();
            throw;
          }
        },
        &bad);
    if (ok)
      continue;
    if (!bad)
      return false; // a lock or a timeout: the whole read again later
    engine::Row row;
    row.msg_id = id;
    row.unreadable = true;
    out->push_back(std::move(row));
    if (unreadable_warned_.insert({s.id, id}).second) {
      if (unreadable_warned_.size() > 10000)
        unreadable_warned_.erase(unreadable_warned_.begin());
      pg::warn("stream \"" + s.name + "\": row " + std::to_string(id) +
               " cannot be read and is skipped (subscribers get a gap notice): " + why);
    }
  }
  return true;
}

bool SqlRowSource::rows_by_id(const engine::StreamInfo &s, const std::vector<int64_t> &ids,
                              size_t max_bytes, std::vector<engine::Row> *out, int64_t *read_upto) {
  return rows(s, "WHERE msg_id = ANY($1) ORDER BY msg_id", &ids, 0, 0, max_bytes, out, read_upto);
}

bool SqlRowSource::rows_after(const engine::StreamInfo &s, int64_t after, int64_t limit,
                              size_t max_bytes, std::vector<engine::Row> *out) {
  int64_t upto = 0;
  return rows(s, "WHERE msg_id > $1 ORDER BY msg_id LIMIT $2", nullptr, after, limit, max_bytes,
              out, &upto);
}

bool SqlRowSource::max_id(const engine::StreamInfo &s, int64_t *id) {
  auto it = max_sql_.find(s.id);
  auto names = tables_.find(s.id);
  if (it == max_sql_.end() || names == tables_.end())
    return false;
  return run("maximum read", [&](pg::SpiTx &tx) {
    pg::Table t = tx.query(it->second, {}, true, owner_of(tx, s, names->second, false));
    *id = t.rows() ? to_i64(t.at(0, 0)) : 0;
  });
}

bool SqlRowSource::nth_newest(const engine::StreamInfo &s, int64_t n, int64_t *id) {
  auto it = rows_sql_.find(s.id);
  auto names = tables_.find(s.id);
  if (it == rows_sql_.end() || names == tables_.end())
    return false;
  return run("backlog read", [&](pg::SpiTx &tx) {
    const unsigned owner = owner_of(tx, s, names->second, false);
    pg::Table t = tx.query("SELECT min(msg_id), count(*) FROM (" + it->second +
                               " WHERE msg_id > $1 ORDER BY msg_id DESC LIMIT $2) x",
                           {pg::Arg::int8(0), pg::Arg::int8(n)}, true, owner);
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

// What retention removes from a stream, worked out from the catalog: its
// retention (or pgbus_stream.default_retention for a stream nobody
// configured), its floor, its tables, and the statement that removes at
// most $2 rows past it (PGMQ queues: moved to the archive). Only the catalog
// is read here; the statement runs as the queue's owner.
constexpr const char *kRetentionPlan = R"SQL(
SELECT s.retention_floor,
       CASE WHEN r.age IS NOT NULL OR s.retention_max IS NOT NULL THEN format(
         $f$WITH victims AS (
              SELECT msg_id FROM %1$I.%2$I
               WHERE msg_id <= %4$s OR enqueued_at < now() - %5$L::interval
               ORDER BY msg_id LIMIT %6$s)$f$ ||
         CASE WHEN s.kind = 'pgmq' AND s.archive_table IS NOT NULL THEN $f$,
              moved AS (DELETE FROM %1$I.%2$I t USING victims v WHERE t.msg_id = v.msg_id
                        RETURNING t.msg_id, t.read_ct, t.enqueued_at, t.vt, t.message),
              ins AS (INSERT INTO %1$I.%3$I (msg_id, read_ct, enqueued_at, vt, message)
                      SELECT msg_id, read_ct, enqueued_at, vt, message FROM moved RETURNING msg_id)
            SELECT count(*), 0 FROM ins$f$
         ELSE $f$,
              gone AS (DELETE FROM %1$I.%2$I t USING victims v WHERE t.msg_id = v.msg_id
                       RETURNING t.msg_id)
            SELECT count(*), coalesce(max(msg_id), 0) FROM gone$f$ END,
         s.queue_schema, s.queue_table, s.archive_table,
         CASE WHEN s.retention_max IS NULL THEN '0'
              ELSE format('coalesce((SELECT msg_id FROM %I.%I ORDER BY msg_id DESC OFFSET %s LIMIT 1), 0)',
                          s.queue_schema, s.queue_table, s.retention_max) END,
         r.age, $2) END,
       s.queue_schema, s.queue_table,
       CASE WHEN s.kind = 'pgmq' THEN s.archive_table END
  FROM pgbus_stream.streams s,
       LATERAL (SELECT CASE WHEN s.retention IS NULL AND s.retention_max IS NULL
                             AND NOT coalesce((to_jsonb(s) ->> 'retention_set')::boolean, true)
                        THEN nullif(current_setting('pgbus_stream.default_retention')::interval,
                                    interval '0')
                        ELSE s.retention END AS age) r
 WHERE s.id = $1)SQL";

bool SqlRowSource::apply_retention(const engine::StreamInfo &s, int batch, int64_t *removed,
                                   int64_t *floor) {
  return run("retention", [&](pg::SpiTx &tx) {
    pg::Table plan = tx.query(kRetentionPlan, {pg::Arg::int8(s.id), pg::Arg::int8(batch)});
    *removed = 0;
    *floor = plan.rows() ? to_i64(plan.at(0, 0)) : 0;
    if (plan.rows() == 0 || !plan.at(0, 1))
      return; // no such stream, or no retention
    std::vector<pg::TableName> names{{plan.at(0, 2).value_or(""), plan.at(0, 3).value_or("")}};
    if (plan.at(0, 4))
      names.push_back({names[0].schema, *plan.at(0, 4)});
    // The owner's triggers fire on these rows: as the owner, not as the worker.
    pg::Table t = tx.query(*plan.at(0, 1), {}, false, owner_of(tx, s, names, true));
    *removed = t.rows() ? to_i64(t.at(0, 0)) : 0;
    const int64_t top = t.rows() ? to_i64(t.at(0, 1)) : 0;
    if (top > *floor) {
      tx.query("UPDATE pgbus_stream.streams SET retention_floor = $2 "
               "WHERE id = $1 AND retention_floor < $2",
               {pg::Arg::int8(s.id), pg::Arg::int8(top)}, false);
      *floor = top;
    }
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
  if (!stats_table_.empty())
    return store_app_history(json);
  return run("history store", [&](pg::SpiTx &tx) {
    tx.query(
        "INSERT INTO pgbus_stream.stream_stats (stream_name, event_type, duration_ms, fanout) "
        "SELECT s, e, d, f FROM jsonb_to_recordset($1::jsonb) AS r(s text, e text, d float8, f "
        "int)",
        {pg::Arg::txt(json)}, false);
  });
}

bool SqlRowSource::prune_history(int64_t max_age_s) {
  if (!stats_table_.empty())
    return prune_app_history(max_age_s);
  return run("history prune", [&](pg::SpiTx &tx) {
    tx.query("DELETE FROM pgbus_stream.stream_stats WHERE id IN (SELECT id FROM "
             "pgbus_stream.stream_stats WHERE created_at < now() - make_interval(secs => $1) "
             "ORDER BY id LIMIT 10000)",
             {pg::Arg::int8(max_age_s)}, false);
  });
}

// ---- the app's own stats table (pgbus_stream.stats_table) -------------------
//
// A table the app owns (the pgbus gem's pgbus_stream_stats, made by a Rails
// migration) is written by a superuser process. It is written only when
// writing it runs no code its owner controls: a plain heap table without
// triggers, rules, check / foreign-key / exclusion constraints, expression
// or partial indexes, operator classes, column types or defaults of its own
// (the id's nextval() and now() are fine). Anything else is refused with a
// warning naming why. To be replaced by running the statements as the
// table's owner under SECURITY_RESTRICTED_OPERATION once the worker can
// (the INSERT and DELETE below are the statements to wrap).
namespace {

constexpr const char *kAppTableCheck =
    "SELECT c.oid::text, "
    "  (SELECT a.atttypid = 'timestamp'::regtype FROM pg_attribute a "
    "    WHERE a.attrelid = c.oid AND a.attname = 'created_at' AND NOT a.attisdropped), "
    "  CASE "
    "  WHEN c.relkind <> 'r' OR c.relispartition THEN 'it is not a plain table' "
    "  WHEN c.relam <> (SELECT oid FROM pg_am WHERE amname = 'heap') THEN 'it is not a heap table' "
    "  WHEN c.relhasrules THEN 'it has rules' "
    "  WHEN EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal) "
    "    THEN 'it has triggers' "
    "  WHEN EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid "
    "               AND k.contype IN ('c', 'f', 'x', 't')) "
    "    THEN 'it has check, foreign-key or exclusion constraints' "
    "  WHEN EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND "
    "               (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL OR EXISTS ( "
    "                 SELECT 1 FROM pg_opclass o WHERE o.oid = ANY (i.indclass::oid[]) "
    "                 AND o.opcnamespace <> 'pg_catalog'::regnamespace))) "
    "    THEN 'it has an expression or partial index, or an operator class of its own' "
    "  WHEN EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_type y ON y.oid = a.atttypid "
    "               WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
    "               AND (y.typnamespace <> 'pg_catalog'::regnamespace OR a.attgenerated <> '')) "
    "    THEN 'it has a column of a type of its own, or a generated column' "
    "  WHEN EXISTS (SELECT 1 FROM pg_attrdef d WHERE d.adrelid = c.oid AND "
    "               pg_get_expr(d.adbin, d.adrelid) !~ "
    "                 '^(nextval\\(''[^'']*''::regclass\\)|now\\(\\)|CURRENT_TIMESTAMP)$') "
    "    THEN 'it has a column default other than nextval() and now()' "
    "  WHEN (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND NOT a.attisdropped "
    "        AND a.attname IN ('stream_name', 'event_type', 'duration_ms', 'fanout', "
    "                          'created_at')) <> 5 "
    "    THEN 'it lacks one of the columns stream_name, event_type, duration_ms, fanout, "
    "created_at' "
    "  END "
    "FROM pg_class c WHERE c.oid = to_regclass($1)";

} // namespace

// In the statement's transaction: the table, safe to write (*target its
// qualified name, *utc when created_at is a timestamp without time zone,
// which Rails fills in UTC); false (with the reason, warned about once a
// minute at most) when it is not to be written.
bool SqlRowSource::app_table(pg::SpiTx &tx, std::string *target, bool *utc) {
  pg::Table t = tx.query(kAppTableCheck, {pg::Arg::txt(stats_table_)});
  std::string refused;
  if (t.rows() == 0)
    refused = "pgbus_stream.stats_table \"" + stats_table_ + "\" does not exist";
  else if (t.at(0, 2))
    refused =
        "pgbus_stream.stats_table \"" + stats_table_ + "\" is not written because " + *t.at(0, 2);
  if (!refused.empty()) {
    const int64_t now = (int64_t)time(nullptr);
    if (refused != last_refusal_ || now - last_refusal_at_ >= 60) {
      pg::warn(refused + " (history rows are kept for a later try)");
      last_refusal_ = refused;
      last_refusal_at_ = now;
    }
    return false;
  }
  // From here names resolve in pg_catalog only, and the table's name is qualified.
  tx.query("SELECT set_config('search_path', 'pg_catalog, pg_temp', true)");
  *target = tx.query("SELECT $1::text::oid::regclass::text", {pg::Arg::txt(*t.at(0, 0))})
                .at(0, 0)
                .value_or("");
  *utc = t.at(0, 1).value_or("f") == "t";
  return true;
}

bool SqlRowSource::store_app_history(const std::string &json) {
  bool written = false;
  return run("history store",
             [&](pg::SpiTx &tx) {
               std::string table;
               bool utc = false;
               if (!(written = app_table(tx, &table, &utc)))
                 return;
               tx.query(
                   "INSERT INTO " + table +
                       " (stream_name, event_type, duration_ms, fanout, created_at) "
                       "SELECT s, e, round(d), CASE WHEN e = 'broadcast' THEN f END, " +
                       (utc ? "now() AT TIME ZONE 'UTC'" : "now()") +
                       " FROM jsonb_to_recordset($1::jsonb) AS r(s text, e text, d float8, f int)",
                   {pg::Arg::txt(json)}, false);
             }) &&
         written;
}

bool SqlRowSource::prune_app_history(int64_t max_age_s) {
  return run("history prune", [&](pg::SpiTx &tx) {
    std::string table;
    bool utc = false;
    if (!app_table(tx, &table, &utc))
      return;
    tx.query("DELETE FROM " + table + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + table +
                 " WHERE created_at < " + (utc ? "now() AT TIME ZONE 'UTC'" : "now()") +
                 " - make_interval(secs => $1::float8) LIMIT 10000))",
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
