// The capture trigger's guard: a stream id must be the one the catalog
// records for the table the trigger fires on (or that _publish() is given).
// Plain PostgreSQL C API only, like the rest of capture.
#include "core/auth.hpp" // before postgres.h
#include "core/names.hpp"
#include "capture/capture.hpp"

#include <string>

extern "C" {
#include "postgres.h"
#include "access/genam.h"
#include "catalog/namespace.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

#include "pg/guard.hpp"

namespace pgbs::capture {
namespace {

int column(TupleDesc desc, const char *name) {
  for (int i = 0; i < desc->natts; i++) {
    Form_pg_attribute a = TupleDescAttr(desc, i);
    if (!a->attisdropped && strcmp(NameStr(a->attname), name) == 0)
      return i + 1;
  }
  return 0;
}

// The catalog index whose one key column is attnum (the primary key on id,
// the unique constraint on name), or InvalidOid.
Oid index_on(Relation rel, int attnum) {
  Oid found = InvalidOid;
  List *indexes = RelationGetIndexList(rel);
  ListCell *lc;
  foreach (lc, indexes) {
    Relation ix = index_open(lfirst_oid(lc), AccessShareLock);
    if (ix->rd_index->indnkeyatts == 1 && ix->rd_index->indkey.values[0] == attnum)
      found = RelationGetRelid(ix);
    index_close(ix, AccessShareLock);
    if (OidIsValid(found))
      break;
  }
  list_free(indexes);
  return found;
}

// One catalog row (schema nsp's streams table), found by id (name == NULL)
// or by name: its id and queue table. Read with a plain index scan under the
// active snapshot: the caller may have no right to read the catalog, and a
// stream created earlier in the same transaction must be seen.
bool catalog_row(Oid nsp, int64 id, const char *name, int64 *id_out, char **schema, char **table,
                 bool *is_public = nullptr) {
  Oid catalog = get_relname_relid("streams", nsp);
  if (!OidIsValid(catalog))
    return false;
  Relation rel = table_open(catalog, AccessShareLock);
  TupleDesc desc = RelationGetDescr(rel);
  const int id_att = column(desc, "id"), name_att = column(desc, "name"),
            schema_att = column(desc, "queue_schema"), table_att = column(desc, "queue_table"),
            public_att = column(desc, "public");
  const int key_att = name ? name_att : id_att;
  Oid index = key_att > 0 ? index_on(rel, key_att) : InvalidOid;
  bool ok = false;
  if (id_att > 0 && schema_att > 0 && table_att > 0 && OidIsValid(index)) {
    ScanKeyData key;
    if (name) {
      ScanKeyInit(&key, key_att, BTEqualStrategyNumber, F_TEXTEQ, CStringGetTextDatum(name));
      key.sk_collation = TupleDescAttr(desc, key_att - 1)->attcollation; // the index's order
    } else {
      ScanKeyInit(&key, key_att, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(id));
    }
    Snapshot snap = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
    SysScanDesc scan = systable_beginscan(rel, index, true, snap, 1, &key);
    HeapTuple tup = systable_getnext(scan);
    if (HeapTupleIsValid(tup)) {
      bool n0, n1, n2;
      Datum di = heap_getattr(tup, id_att, desc, &n0);
      Datum qs = heap_getattr(tup, schema_att, desc, &n1);
      Datum qt = heap_getattr(tup, table_att, desc, &n2);
      if (!n0 && !n1 && !n2) {
        *id_out = DatumGetInt64(di);
        *schema = TextDatumGetCString(qs);
        *table = TextDatumGetCString(qt);
        ok = true;
      }
      if (ok && is_public) {
        bool n3 = true;
        Datum pub = public_att > 0 ? heap_getattr(tup, public_att, desc, &n3) : (Datum)0;
        *is_public = !n3 && DatumGetBool(pub);
      }
    }
    systable_endscan(scan);
  }
  table_close(rel, AccessShareLock);
  return ok;
}

// True when the catalog records stream_id as the stream of table relid.
bool catalog_says(int64 stream_id, Oid relid, Oid nsp) {
  int64 id;
  char *schema, *table;
  if (!catalog_row(nsp, stream_id, nullptr, &id, &schema, &table))
    return false;
  char *relname = get_rel_name(relid);
  char *relnsp = get_namespace_name(get_rel_namespace(relid));
  return relname && relnsp && strcmp(schema, relnsp) == 0 && strcmp(table, relname) == 0;
}

} // namespace

// A stream by its name, else by the pgbus gem's logical name
// ("ai_chat_3a4f:messages"): the stream whose queue is the gem's queue for
// it, under whichever name the catalog holds it (names::gem_stream, the rule
// the worker applies to signed names).
bool find_stream(unsigned int nsp, const char *name, int64_t *id, char **schema, char **table,
                 bool *is_public) {
  int64 found_id = 0;
  bool found = catalog_row(nsp, 0, name, &found_id, schema, table, is_public);
  if (!found) {
    // Copied out of C++ objects before any PostgreSQL call (which may longjmp).
    constexpr int kNames = 3, kLen = 160;
    char names[kNames][kLen] = {}, gem_table[kLen] = "";
    pgbs::pg::entry([&]() -> Datum {
      pgbs::names::GemStream gs;
      if (pgbs::names::gem_stream(name, &gs) && gs.table.size() < sizeof(gem_table)) {
        strlcpy(gem_table, gs.table.c_str(), sizeof(gem_table));
        for (size_t i = 0; i < gs.names.size() && i < (size_t)kNames; i++)
          if (gs.names[i].size() < (size_t)kLen)
            strlcpy(names[i], gs.names[i].c_str(), kLen);
      }
      return (Datum)0;
    });
    for (const char *candidate : names)
      if (!found && candidate[0] != '\0' && gem_table[0] != '\0' &&
          catalog_row(nsp, 0, candidate, &found_id, schema, table, is_public))
        found = pgbs::pg::entry([&]() -> Datum {
                  pgbs::names::GemStream gs;
                  return BoolGetDatum(pgbs::names::gem_stream(name, &gs) &&
                                      pgbs::names::is_gem_queue(gs, *schema, *table));
                }) != (Datum)0;
  }
  *id = found ? found_id : 0;
  return found;
}

// Refuses a capture trigger (or an ephemeral publish) whose stream id is not
// the one the catalog records for its table: nobody can feed another stream
// from a table of their own. Pairs once confirmed are remembered (stream ids
// never repeat, and only who may create such triggers could move one).
void check_stream_table(int64_t stream_id, Oid relid, Oid fn) {
  static struct {
    int64 stream_id;
    Oid relid;
  } confirmed[64];
  static int next = 0;
  const auto &last = confirmed[(next + 63) % 64]; // a producer's tables, one at a time
  if (last.stream_id == stream_id && last.relid == relid)
    return;
  for (const auto &c : confirmed)
    if (c.stream_id == stream_id && c.relid == relid)
      return;
  if (!catalog_says(stream_id, relid, get_func_namespace(fn)))
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("pgbus_stream: stream %lld is not the stream of table %s",
                           (long long)stream_id, get_rel_name(relid) ? get_rel_name(relid) : "?"),
                    errhint("Capture triggers are installed by create_stream() and attach().")));
  confirmed[next++ % 64] = {stream_id, relid};
}

int64_t trigger_stream_id(unsigned int tgoid, const char *arg) {
  static struct {
    Oid tgoid;
    int64 stream_id;
  } parsed[16];
  static int next = 0;
  for (const auto &p : parsed)
    if (p.tgoid == tgoid && OidIsValid(tgoid))
      return p.stream_id;
  const int64 id = pg_strtoint64(arg);
  parsed[next++ % 16] = {tgoid, id};
  return id;
}

} // namespace pgbs::capture
