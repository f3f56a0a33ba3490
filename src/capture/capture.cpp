// Capture: a BEFORE STATEMENT trigger publishes this backend's floor for the
// stream (so the horizon never passes an id it may still insert), an AFTER
// STATEMENT trigger with a transition table collects the new msg_ids in
// backend-local memory, and the commit callback copies them into the shared
// ring in one short critical section and sets the workers' latches.
//
// This file uses only PostgreSQL's C API and plain structs (no C++ library
// objects, nothing that throws), so a PostgreSQL error here never skips a C++
// destructor. Everything that can fail happens in the triggers; the commit
// callback only copies into the ring, bumps atomics and sets latches.
#include "capture/capture.hpp"
#include "pgbus_stream.hpp"
#include "shmem/shared.hpp"

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "executor/tuptable.h"

PG_FUNCTION_INFO_V1(pgbus_stream_capture);
PG_FUNCTION_INFO_V1(pgbus_stream_catalog_changed);
}

namespace pgbs::capture {

using shmem::RecordHeader;
using shmem::RecordKind;
using shmem::StreamEntry;

namespace {

// A stream this transaction has registered a floor for.
struct TxStream {
  int64 stream_id;
  StreamEntry *entry;
  int64 max_id; // highest msg_id collected (0 = none)
  int64 count;
};

struct PendingRow {
  int64 stream_id;
  int64 msg_id;
  int nest_level;
};

constexpr int kMaxTxStreams = 256;

struct TxState {
  TxStream streams[kMaxTxStreams];
  int nstreams;
  bool registered;   // this backend's slot holds entries
  bool overflowed;   // more than max_pending_events: workers catch up from the tables
  bool catalog_changed;
  PendingRow *rows;  // in TopMemoryContext
  int64 nrows;
  int64 cap;
};

TxState tx;

shmem::BackendSlot *my_slot() { return &shmem::shared()->slots[MyProc->pgprocno]; }

TxStream *find_tx_stream(int64 stream_id) {
  for (int i = 0; i < tx.nstreams; i++)
    if (tx.streams[i].stream_id == stream_id)
      return &tx.streams[i];
  return nullptr;
}

// Publishes a floor for stream_id in this backend's slot, before any msg_id of
// the statement is drawn from the sequence. Seqlock-style generation counter:
// the worker re-reads the slot if it changed while it was reading.
TxStream *register_stream(int64 stream_id) {
  TxStream *ts = find_tx_stream(stream_id);
  if (ts)
    return ts;
  StreamEntry *e = shmem::stream_entry(MyDatabaseId, stream_id, true);
  if (e == nullptr)
    ereport(ERROR, (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
                    errmsg("pgbus_stream: too many streams in shared memory"),
                    errhint("Raise pgbus_stream.max_streams and restart the server.")));
  if (tx.nstreams >= kMaxTxStreams)
    ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                    errmsg("pgbus_stream: a transaction can write to at most %d streams", kMaxTxStreams)));
  shmem::BackendSlot *slot = my_slot();
  slot->dboid = MyDatabaseId;
  if (tx.nstreams < shmem::kSlotStreams) {
    int64 floor = (int64)pg_atomic_read_u64(&e->max_committed);
    int n = tx.nstreams;
    slot->entries[n].stream_id = stream_id;
    slot->entries[n].floor = floor;
    pg_write_barrier();
    pg_atomic_write_u32(&slot->count, (uint32)(n + 1));
  } else {
    // Out of slot entries: hold every horizon of this database until commit.
    pg_write_barrier();
    pg_atomic_write_u32(&slot->wildcard, 1);
  }
  pg_memory_barrier(); // the slot is visible before this statement draws any msg_id
  ts = &tx.streams[tx.nstreams++];
  ts->stream_id = stream_id;
  ts->entry = e;
  ts->max_id = 0;
  ts->count = 0;
  tx.registered = true;
  return ts;
}

void collect(TxStream *ts, int64 msg_id) {
  if (msg_id > ts->max_id)
    ts->max_id = msg_id;
  ts->count++;
  if (tx.overflowed)
    return;
  if (tx.nrows >= guc::max_pending_events) {
    tx.overflowed = true; // the workers will read this transaction's rows from the table
    tx.nrows = 0;
    return;
  }
  if (tx.nrows >= tx.cap) {
    int64 ncap = tx.cap ? tx.cap * 2 : 64;
    if (ncap > guc::max_pending_events)
      ncap = guc::max_pending_events;
    tx.rows = tx.rows ? (PendingRow *)repalloc(tx.rows, ncap * sizeof(PendingRow))
                      : (PendingRow *)MemoryContextAlloc(TopMemoryContext, ncap * sizeof(PendingRow));
    tx.cap = ncap;
  }
  PendingRow *r = &tx.rows[tx.nrows++];
  r->stream_id = ts->stream_id;
  r->msg_id = msg_id;
  r->nest_level = GetCurrentTransactionNestLevel();
}

void clear_slot() {
  if (!tx.registered)
    return;
  shmem::BackendSlot *slot = my_slot();
  pg_atomic_fetch_add_u32(&slot->gen, 1); // readers that saw the old entries retry
  pg_memory_barrier();
  pg_atomic_write_u32(&slot->count, 0);
  pg_atomic_write_u32(&slot->wildcard, 0);
  pg_memory_barrier();
}

void reset_tx() {
  tx.nstreams = 0;
  tx.registered = false;
  tx.overflowed = false;
  tx.catalog_changed = false;
  tx.nrows = 0;
  if (tx.cap > 4096) { // do not keep a large buffer between transactions
    pfree(tx.rows);
    tx.rows = nullptr;
    tx.cap = 0;
  }
}

void wake_workers() {
  shmem::Shared *s = shmem::shared();
  for (int i = 0; i < shmem::kMaxWorkers; i++) {
    Latch *l = s->worker_latch[i];
    if (l != nullptr)
      SetLatch(l);
  }
}

void ring_copy(shmem::Shared *s, uint64 pos, const void *src, Size len) {
  uint64 off = pos % s->ring_capacity;
  Size first = Min(len, (Size)(s->ring_capacity - off));
  memcpy(s->ring + off, src, first);
  if (first < len)
    memcpy(s->ring, (const char *)src + first, len - first);
}

// Runs at XACT_EVENT_COMMIT: nothing here may fail.
void publish_commit() {
  shmem::Shared *s = shmem::shared();
  Size need = (Size)tx.nrows * sizeof(RecordHeader);
  if (tx.overflowed || need > s->ring_capacity / 2) {
    pg_atomic_fetch_add_u64(&s->overrun_seq, 1);
    pg_atomic_fetch_add_u64(&s->ring_overflows, 1);
  } else if (tx.nrows > 0) {
    RecordHeader h;
    memset(&h, 0, sizeof(h));
    h.len = sizeof(RecordHeader);
    h.kind = RecordKind::Row;
    h.dboid = MyDatabaseId;
    h.commit_us = (int64)GetCurrentTimestamp();
    LWLockAcquire(s->ring_lock, LW_EXCLUSIVE);
    uint64 head = pg_atomic_read_u64(&s->ring_head);
    for (int64 i = 0; i < tx.nrows; i++) {
      h.stream_id = tx.rows[i].stream_id;
      h.msg_id = tx.rows[i].msg_id;
      ring_copy(s, head, &h, sizeof(h));
      head += sizeof(h);
    }
    pg_atomic_write_u64(&s->ring_head, head);
    LWLockRelease(s->ring_lock);
  }
  for (int i = 0; i < tx.nstreams; i++) {
    TxStream *ts = &tx.streams[i];
    if (ts->max_id > 0)
      shmem::advance_max_committed(ts->entry, ts->max_id);
    pg_atomic_fetch_add_u64(&ts->entry->events, (uint64)ts->count);
  }
  clear_slot();
  if (tx.catalog_changed)
    pg_atomic_fetch_add_u64(&s->catalog_version, 1);
  wake_workers();
}

void on_xact(XactEvent event, void *) {
  switch (event) {
  case XACT_EVENT_PRE_PREPARE:
    if (tx.registered)
      ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                      errmsg("pgbus_stream: cannot PREPARE a transaction that wrote to a stream")));
    break;
  case XACT_EVENT_COMMIT:
    if (tx.registered || tx.catalog_changed)
      publish_commit();
    reset_tx();
    break;
  case XACT_EVENT_ABORT:
  case XACT_EVENT_PREPARE:
    clear_slot();
    reset_tx();
    break;
  default:
    break;
  }
}

void on_subxact(SubXactEvent event, SubTransactionId, SubTransactionId, void *) {
  if (tx.nrows == 0)
    return;
  int level = GetCurrentTransactionNestLevel();
  if (event == SUBXACT_EVENT_ABORT_SUB) {
    // Rows of the aborted subtransaction (and its children) sit at the tail.
    while (tx.nrows > 0 && tx.rows[tx.nrows - 1].nest_level >= level)
      tx.nrows--;
  } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
    for (int64 i = tx.nrows - 1; i >= 0 && tx.rows[i].nest_level >= level; i--)
      tx.rows[i].nest_level = level - 1;
  }
}

int msg_id_attnum(TupleDesc desc) {
  for (int i = 0; i < desc->natts; i++) {
    Form_pg_attribute a = TupleDescAttr(desc, i);
    if (!a->attisdropped && strcmp(NameStr(a->attname), "msg_id") == 0)
      return i + 1;
  }
  return 0;
}

} // namespace

void install_callbacks() {
  memset(&tx, 0, sizeof(tx));
  RegisterXactCallback(on_xact, nullptr);
  RegisterSubXactCallback(on_subxact, nullptr);
}

void note_catalog_change() { tx.catalog_changed = true; }

} // namespace pgbs::capture

using namespace pgbs::capture;

// pgbus_stream._capture(stream_id): BEFORE INSERT FOR EACH STATEMENT publishes
// the floor; AFTER INSERT FOR EACH STATEMENT (REFERENCING NEW TABLE) collects
// the msg_ids.
extern "C" Datum pgbus_stream_capture(PG_FUNCTION_ARGS) {
  if (!CALLED_AS_TRIGGER(fcinfo))
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("pgbus_stream._capture() must be called as a trigger")));
  TriggerData *td = (TriggerData *)fcinfo->context;
  if (!TRIGGER_FIRED_BY_INSERT(td->tg_event) || !TRIGGER_FIRED_FOR_STATEMENT(td->tg_event) ||
      td->tg_trigger->tgnargs != 1)
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("pgbus_stream._capture() must be a statement-level INSERT trigger with the "
                           "stream id as its argument")));
  int64 stream_id = pg_strtoint64(td->tg_trigger->tgargs[0]);
  TxStream *ts = register_stream(stream_id);
  if (TRIGGER_FIRED_BEFORE(td->tg_event))
    return PointerGetDatum(NULL);

  Tuplestorestate *rows = td->tg_newtable;
  if (rows == nullptr)
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("pgbus_stream._capture() AFTER trigger needs REFERENCING NEW TABLE")));
  TupleDesc desc = RelationGetDescr(td->tg_relation);
  int attnum = msg_id_attnum(desc);
  if (attnum == 0)
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_COLUMN),
                    errmsg("pgbus_stream: table \"%s\" has no msg_id column",
                           RelationGetRelationName(td->tg_relation))));
  TupleTableSlot *slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
  int ptr = tuplestore_alloc_read_pointer(rows, 0);
  tuplestore_select_read_pointer(rows, ptr);
  tuplestore_rescan(rows);
  while (tuplestore_gettupleslot(rows, true, false, slot)) {
    bool isnull;
    Datum d = slot_getattr(slot, attnum, &isnull);
    if (!isnull)
      collect(ts, DatumGetInt64(d));
  }
  tuplestore_select_read_pointer(rows, 0);
  ExecDropSingleTupleTableSlot(slot);
  return PointerGetDatum(NULL);
}

// pgbus_stream._catalog_changed(stream_id): called by the catalog functions;
// makes sure shared memory tracks the stream and tells the workers at commit.
extern "C" Datum pgbus_stream_catalog_changed(PG_FUNCTION_ARGS) {
  if (!PG_ARGISNULL(0)) {
    int64 stream_id = PG_GETARG_INT64(0);
    if (pgbs::shmem::stream_entry(MyDatabaseId, stream_id, true) == nullptr)
      ereport(ERROR, (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
                      errmsg("pgbus_stream: too many streams in shared memory"),
                      errhint("Raise pgbus_stream.max_streams and restart the server.")));
  }
  note_catalog_change();
  PG_RETURN_VOID();
}
