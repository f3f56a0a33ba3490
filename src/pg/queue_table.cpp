// Which tables can be taken as a queue (see queue_table.hpp). Plain
// PostgreSQL C API, read from the system caches.
#include "pg/queue_table.hpp"

extern "C" {
#include "postgres.h"
#include "access/htup_details.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "nodes/pg_list.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

namespace pgbs::pg {
namespace {

// PGMQ's columns that the worker reads or moves to the archive.
struct Column {
  const char *name;
  Oid type;
  bool required;
};
const Column kColumns[] = {
    {"msg_id", INT8OID, true},
    {"read_ct", INT4OID, true},
    {"enqueued_at", TIMESTAMPTZOID, true},
    {"vt", TIMESTAMPTZOID, true},
    {"message", JSONBOID, true},
    {"headers", JSONBOID, false},
};

const char *kind_name(char relkind) {
  switch (relkind) {
  case RELKIND_VIEW:
    return "a view";
  case RELKIND_MATVIEW:
    return "a materialized view";
  case RELKIND_FOREIGN_TABLE:
    return "a foreign table";
  case RELKIND_SEQUENCE:
    return "a sequence";
  case RELKIND_COMPOSITE_TYPE:
    return "a composite type";
  case RELKIND_INDEX:
  case RELKIND_PARTITIONED_INDEX:
    return "an index";
  default:
    return "not a table";
  }
}

// The relation's kind, rules and owner; `what` names it in the reason ("it",
// "its partition x").
bool relation_ok(Oid relid, const char *what, Oid *owner, bool *has_children, char *why,
                 size_t len) {
  HeapTuple tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
  if (!HeapTupleIsValid(tup)) {
    snprintf(why, len, "%s does not exist", what);
    return false;
  }
  const Form_pg_class c = (Form_pg_class)GETSTRUCT(tup);
  const char kind = c->relkind;
  const bool rules = c->relhasrules;
  const Oid rel_owner = c->relowner;
  *has_children = c->relhassubclass;
  ReleaseSysCache(tup);
  if (kind != RELKIND_RELATION && kind != RELKIND_PARTITIONED_TABLE) {
    snprintf(why, len, "%s is %s", what, kind_name(kind));
    return false;
  }
  // A rule rewrites what the worker runs there into the owner's statements.
  if (rules) {
    snprintf(why, len, "%s has rules", what);
    return false;
  }
  if (OidIsValid(*owner) && rel_owner != *owner) {
    snprintf(why, len, "%s belongs to another role than the table", what);
    return false;
  }
  *owner = rel_owner;
  return true;
}

bool columns_ok(Oid relid, char *why, size_t len) {
  for (const Column &col : kColumns) {
    HeapTuple tup = SearchSysCacheAttName(relid, col.name); // NULL when dropped
    if (!HeapTupleIsValid(tup)) {
      if (!col.required)
        continue;
      snprintf(why, len, "it has no column %s", col.name);
      return false;
    }
    const Oid type = ((Form_pg_attribute)GETSTRUCT(tup))->atttypid;
    ReleaseSysCache(tup);
    if (type != col.type) {
      snprintf(why, len, "column %s is %s, not %s", col.name, format_type_be(type),
               format_type_be(col.type));
      return false;
    }
  }
  return true;
}

} // namespace

bool queue_table_ok(unsigned relid, unsigned *owner, char *why, size_t len) {
  Oid who = InvalidOid;
  bool has_children = false;
  if (!relation_ok(relid, "it", &who, &has_children, why, len) || !columns_ok(relid, why, len))
    return false;
  // Partitions and inheritance children are read and written with the
  // table: the same rule holds for each (their columns are the table's).
  if (has_children) {
    List *all = find_all_inheritors(relid, NoLock, nullptr);
    ListCell *lc;
    foreach (lc, all) {
      const Oid child = lfirst_oid(lc);
      if (child == relid)
        continue;
      char what[NAMEDATALEN + 32];
      char *name = get_rel_name(child);
      snprintf(what, sizeof(what), "its %s %s",
               get_rel_relispartition(child) ? "partition" : "child table", name ? name : "?");
      bool grandchildren;
      if (!relation_ok(child, what, &who, &grandchildren, why, len))
        return false;
    }
  }
  *owner = who;
  return true;
}

} // namespace pgbs::pg
