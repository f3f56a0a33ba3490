// SpiTx: transactions and SPI queries for the worker (see spi.hpp).
#include "pg/spi.hpp"
#include "pg/envelope.hpp"
#include "pg/guard.hpp"
#include "pg/queue_table.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <stdexcept>

extern "C" {
#include "postgres.h"
#include "access/detoast.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/lockdefs.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/ruleutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
}

namespace pgbs::pg {

namespace {
// Where errors are copied: made at library load (an allocation failure then
// is an ordinary error, not one raised while another is being handled).
MemoryContext error_copy_cxt = nullptr;
} // namespace

void init_error_copy() {
  error_copy_cxt =
      AllocSetContextCreate(TopMemoryContext, "pgbus_stream error copy", ALLOCSET_SMALL_SIZES);
}

Error take_error(MemoryContext cxt) {
  // Copied into a context that surely exists (the caller's may be gone, e.g.
  // a failed commit deleted it) and reset below: nothing stays behind.
  // FreeErrorData() alone would not do: in PostgreSQL 15 it leaves the copies
  // of filename, funcname, domain, context_domain and message_id allocated.
  MemoryContextSwitchTo(error_copy_cxt);
  ErrorData *edata = CopyErrorData();
  FlushErrorState();
  MemoryContextSwitchTo(cxt);
  // Copying into std::string may throw (bad_alloc): reset in that case too.
  struct Reset {
    ~Reset() { MemoryContextReset(error_copy_cxt); }
  } guard;
  return Error(edata);
}

namespace {
// A stop request cancels only a query of ours: set while a SpiTx is open, so
// that no cancel is left pending where a longjmp would cross C++ frames.
volatile sig_atomic_t in_query = 0, cancel_sent = 0;

void query_done() {
  in_query = 0;
  if (cancel_sent) {
    cancel_sent = 0;
    QueryCancelPending = false;
  }
}
} // namespace

void cancel_query_from_signal() {
  if (in_query) {
    cancel_sent = 1;
    QueryCancelPending = true;
    InterruptPending = true;
  }
}

SpiTx::SpiTx() {
  outer_ = CurrentMemoryContext;
  in_query = 1;
  call([] {
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    if (SPI_connect() != SPI_OK_CONNECT)
      elog(ERROR, "pgbus_stream: SPI_connect failed");
    PushActiveSnapshot(GetTransactionSnapshot());
  });
  open_ = true;
}

SpiTx::~SpiTx() {
  if (!open_) {
    query_done();
    return;
  }
  // Abort without letting an error escape a destructor.
  MemoryContext oldcxt = CurrentMemoryContext;
  PG_TRY();
  { AbortCurrentTransaction(); }
  PG_CATCH();
  {
    MemoryContextSwitchTo(oldcxt);
    FlushErrorState();
  }
  PG_END_TRY();
  MemoryContextSwitchTo(static_cast<MemoryContext>(outer_)); // abort leaves TopMemoryContext
  query_done();
}

void SpiTx::commit() {
  open_ = false;
  // SPI_finish and the commit delete the context SPI made current; an error
  // is taken back to the caller's.
  MemoryContextSwitchTo(static_cast<MemoryContext>(outer_));
  try {
    call([] {
      SPI_finish();
      PopActiveSnapshot();
      CommitTransactionCommand();
    });
  } catch (...) {
    open_ = true; // let the destructor abort
    throw;
  }
  MemoryContextSwitchTo(static_cast<MemoryContext>(outer_)); // the commit leaves TopMemoryContext
}

namespace {

constexpr int kMaxArgs = 8;

// Room for a query's arguments as Datums, bound by bind_args.
struct Bound {
  explicit Bound(const std::vector<Arg> &args) : n((int)args.size()) {
    if (n > kMaxArgs)
      throw std::runtime_error("too many SPI arguments");
  }
  int n;
  Oid types[kMaxArgs];
  Datum values[kMaxArgs];
  char nulls[kMaxArgs];
};

// Query arguments as Datums (inside pg::call: this allocates).
void bind_args(const std::vector<Arg> &args, Oid *types, Datum *values, char *nulls) {
  for (size_t i = 0; i < args.size(); i++) {
    const Arg &a = args[i];
    nulls[i] = ' ';
    if (a.kind == Arg::Int8) {
      types[i] = INT8OID;
      values[i] = Int64GetDatum(a.i);
    } else if (a.kind == Arg::Text) {
      types[i] = TEXTOID;
      values[i] = PointerGetDatum(cstring_to_text_with_len(a.text.data(), (int)a.text.size()));
    } else {
      types[i] = INT8ARRAYOID;
      Datum *elems = (Datum *)palloc(sizeof(Datum) * (a.ids.size() + 1));
      for (size_t k = 0; k < a.ids.size(); k++)
        elems[k] = Int64GetDatum(a.ids[k]);
      values[i] = PointerGetDatum(construct_array(elems, (int)a.ids.size(), INT8OID, sizeof(int64),
                                                  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
    }
  }
}

// Runs fn (which executes a statement, or part of one) with the rights of
// as_role when it is nonzero (inside pg::call). As the owner: what VACUUM
// does around a table's index functions.
template <typename F> void as_role_run(unsigned as_role, F &&fn) {
  Oid save_user = InvalidOid;
  int save_sec = 0;
  volatile int nest = 0; // (read after a longjmp in PG_CATCH paths)
  if (as_role != 0) {
    GetUserIdAndSecContext(&save_user, &save_sec);
    SetUserIdAndSecContext(as_role, save_sec | SECURITY_RESTRICTED_OPERATION);
    nest = NewGUCNestLevel();
    (void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
                            GUC_ACTION_SAVE, true, 0, false);
    // A worker has no client loop to arm statement_timeout: armed here,
    // before the owner's code runs (a SET of its own cannot lift it).
    if (StatementTimeout > 0)
      enable_timeout_after(STATEMENT_TIMEOUT, StatementTimeout);
  }
  PG_TRY();
  {
    fn();
    if (as_role != 0) {
      disable_timeout(STATEMENT_TIMEOUT, false);
      AtEOXact_GUC(false, nest); // undoes every SET of the statement, session-level too
    }
  }
  PG_CATCH();
  {
    // The settings go back when the caller aborts the transaction.
    if (as_role != 0) {
      disable_timeout(STATEMENT_TIMEOUT, false);
      SetUserIdAndSecContext(save_user, save_sec);
    }
    PG_RE_THROW();
  }
  PG_END_TRY();
  if (as_role != 0)
    SetUserIdAndSecContext(save_user, save_sec);
}

} // namespace

Table SpiTx::query(const std::string &sql, const std::vector<Arg> &args, bool read_only,
                   unsigned as_role) {
  // Arguments are converted to Datums first (PostgreSQL side), then the query
  // runs, and the text of each cell is collected in palloc'd memory; the C++
  // copy happens after the guarded region.
  Bound b(args);
  const int nargs = b.n;
  Oid *types = b.types;
  Datum *values = b.values;
  char *nulls = b.nulls;
  struct Raw {
    char **cells;
    uint64 nrows;
    int ncols;
  } raw{nullptr, 0, 0};
  const char *sqltext = sql.c_str();
  const std::vector<Arg> *argp = &args;
  call([&] {
    bind_args(*argp, types, values, nulls);
    as_role_run(as_role, [&] {
      int rc = SPI_execute_with_args(sqltext, nargs, types, values, nulls, read_only, 0);
      if (rc < 0)
        elog(ERROR, "pgbus_stream: SPI query failed (%s)", SPI_result_code_string(rc));
      if (SPI_tuptable != nullptr) {
        raw.nrows = SPI_processed;
        raw.ncols = SPI_tuptable->tupdesc->natts;
        raw.cells = (char **)palloc0(sizeof(char *) * (raw.nrows * raw.ncols + 1));
        for (uint64 r = 0; r < raw.nrows; r++)
          for (int c = 0; c < raw.ncols; c++)
            raw.cells[r * raw.ncols + c] =
                SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, c + 1);
      }
    });
  });
  Table t;
  t.ncols = raw.ncols;
  t.cells.reserve(raw.nrows * raw.ncols);
  for (uint64 i = 0; i < raw.nrows * (uint64)raw.ncols; i++) {
    if (raw.cells[i])
      t.cells.emplace_back(std::string(raw.cells[i]));
    else
      t.cells.emplace_back(std::nullopt);
  }
  return t;
}

// A cursor fetched one row at a time, all inside one guarded call (the
// stop rule is plain arithmetic), the tuples kept until their cells are
// copied out after it. The fetched tuples hold a large value as a TOAST
// pointer; each is detoasted once, into a memory context of its own that
// goes as soon as the cells are C++ strings: a large payload exists twice
// at most here, detoasted and in its copy.
Table SpiTx::query_until(const std::string &sql, const std::vector<Arg> &args, unsigned as_role,
                         const Until &until, int64_t *last_id, bool *cut) {
  Bound b(args);
  const int nargs = b.n;
  Oid *types = b.types;
  Datum *values = b.values;
  char *nulls = b.nulls;
  struct Raw {
    SPITupleTable **tables;
    const char **data; // nullptr: NULL
    size_t *len;
    uint64 nrows;
    int ncols;
    int width; // cells per row
    MemoryContext cells;
  } raw{nullptr, nullptr, nullptr, 0, 0, 0, nullptr};
  const char *sqltext = sql.c_str();
  const std::vector<Arg> *argp = &args;
  bool stopped = false;
  int64 last = 0;
  call([&] {
    bind_args(*argp, types, values, nulls);
    as_role_run(as_role, [&] {
      // Planned for the first rows: the read may stop early.
      Portal portal = SPI_cursor_open_with_args(nullptr, sqltext, nargs, types, values, nulls, true,
                                                CURSOR_OPT_FAST_PLAN);
      uint64 cap = 16;
      raw.tables = (SPITupleTable **)palloc0(sizeof(SPITupleTable *) * cap);
      size_t bytes = 0;
      for (;;) {
        SPI_cursor_fetch(portal, true, 1);
        if (SPI_tuptable == nullptr || SPI_processed == 0)
          break;
        SPITupleTable *tt = SPI_tuptable;
        if (raw.nrows == cap) {
          cap *= 2;
          raw.tables = (SPITupleTable **)repalloc(raw.tables, sizeof(SPITupleTable *) * cap);
        }
        raw.tables[raw.nrows++] = tt;
        raw.ncols = tt->tupdesc->natts;
        bool isnull = false;
        Datum id = SPI_getbinval(tt->vals[0], tt->tupdesc, 1, &isnull);
        if (!isnull && TupleDescAttr(tt->tupdesc, 0)->atttypid == INT8OID)
          last = DatumGetInt64(id);
        if (until.bytes_col < raw.ncols) {
          const Oid type = TupleDescAttr(tt->tupdesc, until.bytes_col)->atttypid;
          Datum d = SPI_getbinval(tt->vals[0], tt->tupdesc, until.bytes_col + 1, &isnull);
          if (!isnull && (type == TEXTOID || type == JSONBOID))
            bytes += toast_raw_datum_size(d);
        }
        if ((bytes >= until.max_bytes || raw.nrows >= until.max_rows) && last >= until.cover_id) {
          stopped = true;
          break;
        }
      }
      SPI_cursor_close(portal);
    });
    const int env =
        raw.nrows && until.envelope_col >= 0 && until.envelope_col < raw.ncols &&
                TupleDescAttr(raw.tables[0]->tupdesc, until.envelope_col)->atttypid == JSONBOID
            ? until.envelope_col
            : -1;
    raw.width = raw.ncols + (env >= 0 ? Envelope::kParts - 1 : 0);
    const size_t cells = raw.nrows * (size_t)raw.width + 1;
    raw.data = (const char **)palloc0(sizeof(char *) * cells);
    raw.len = (size_t *)palloc0(sizeof(size_t) * cells);
    raw.cells = AllocSetContextCreate(CurrentMemoryContext, "pgbus_stream row cells",
                                      ALLOCSET_DEFAULT_SIZES);
    MemoryContext caller = MemoryContextSwitchTo(raw.cells);
    for (uint64 r = 0; r < raw.nrows; r++) {
      SPITupleTable *tt = raw.tables[r];
      const char **data = raw.data + r * raw.width;
      size_t *len = raw.len + r * raw.width;
      for (int c = 0; c < raw.ncols; c++) {
        bool isnull = false;
        // (the envelope's cells: data, event and visible_to in its place,
        // exclude after the last column)
        const int at = env >= 0 && c > env ? c + Envelope::kParts - 2 : c;
        const Oid type = TupleDescAttr(tt->tupdesc, c)->atttypid;
        if (c == env) {
          Datum d = SPI_getbinval(tt->vals[0], tt->tupdesc, c + 1, &isnull);
          if (isnull)
            continue;
          Envelope e;
          read_envelope(DatumGetJsonbP(d), &e);
          for (int p = 0; p < Envelope::kParts; p++) {
            const int to = p == Envelope::Exclude ? raw.width - 1 : at + p;
            data[to] = e.text[p];
            len[to] = e.len[p];
          }
        } else if (type == TEXTOID) {
          Datum d = SPI_getbinval(tt->vals[0], tt->tupdesc, c + 1, &isnull);
          if (!isnull) {
            text *t = pg_detoast_datum_packed((struct varlena *)DatumGetPointer(d));
            data[at] = VARDATA_ANY(t);
            len[at] = VARSIZE_ANY_EXHDR(t);
          }
        } else if (char *v = SPI_getvalue(tt->vals[0], tt->tupdesc, c + 1)) {
          data[at] = v;
          len[at] = strlen(v);
        }
      }
    }
    MemoryContextSwitchTo(caller);
  });
  Table t;
  t.ncols = raw.width;
  t.cells.reserve(raw.nrows * raw.width);
  for (uint64 i = 0; i < raw.nrows * (uint64)raw.width; i++) {
    if (raw.data[i] == nullptr)
      t.cells.emplace_back(std::nullopt);
    else
      t.cells.emplace_back(std::string(raw.data[i], raw.len[i]));
  }
  call([&] {
    MemoryContextDelete(raw.cells);
    for (uint64 r = 0; r < raw.nrows; r++)
      SPI_freetuptable(raw.tables[r]);
    pfree(raw.tables);
    pfree(raw.data);
    pfree(raw.len);
  });
  if (last_id)
    *last_id = last;
  if (cut)
    *cut = stopped;
  return t;
}

unsigned SpiTx::queue_owner(const std::vector<TableName> &tables, bool write, std::string *why) {
  char reason[256] = "";
  Oid owner = InvalidOid;
  const std::vector<TableName> *tp = &tables;
  call([&] {
    for (const TableName &t : *tp) {
      RangeVar *rv = makeRangeVar(pstrdup(t.schema.c_str()), pstrdup(t.table.c_str()), -1);
      // (a table that is gone is PostgreSQL's error, as for any statement)
      const Oid relid = RangeVarGetRelidExtended(rv, write ? RowExclusiveLock : AccessShareLock, 0,
                                                 nullptr, nullptr);
      const char *name = quote_qualified_identifier(rv->schemaname, rv->relname);
      char problem[200];
      unsigned table_owner = 0;
      if (!queue_table_ok(relid, &table_owner, problem, sizeof(problem))) {
        snprintf(reason, sizeof(reason), "%s is not a queue table: %s", name, problem);
        owner = InvalidOid;
        return;
      }
      if (OidIsValid(owner) && owner != table_owner) {
        snprintf(reason, sizeof(reason), "%s belongs to another role than its queue", name);
        owner = InvalidOid;
        return;
      }
      owner = table_owner;
    }
  });
  if (!OidIsValid(owner) && why)
    *why = reason;
  return owner;
}

// ereport below ERROR checks for interrupts when done: held off here, so a
// pending cancel or termination is never acted on from a C++ frame.
void warn(const std::string &msg) {
  HOLD_INTERRUPTS();
  ereport(WARNING, (errmsg("pgbus_stream: %s", msg.c_str())));
  RESUME_INTERRUPTS();
}
void log(const std::string &msg) {
  HOLD_INTERRUPTS();
  ereport(LOG, (errmsg("pgbus_stream: %s", msg.c_str())));
  RESUME_INTERRUPTS();
}

} // namespace pgbs::pg
