// Capture: the floor hooks (floor_hook.cpp) publish this backend's floor for
// the stream before a statement draws any msg_id (so the horizon never passes
// an id it may still insert), an AFTER INSERT FOR EACH ROW trigger collects
// each new msg_id in backend-local memory, and the commit callback copies
// them into the shared ring in one short critical section and sets the
// workers' latches.
//
// This file uses only PostgreSQL's C API and plain structs (no C++ library
// objects, nothing that throws), so a PostgreSQL error here never skips a C++
// destructor. Everything that can fail happens in the hooks and triggers; the
// commit callback only copies into the ring, bumps atomics and sets latches.
#include "core/wire.hpp" // first: it refuses postgres.h before it
#include "capture/capture.hpp"
#include "capture/wal.hpp"
#include "settings/settings.hpp"
#include "shmem/applied_hold.hpp"
#include "shmem/ring.hpp"
#include "shmem/shared.hpp"
#include "shmem/slots.hpp"

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
#include "commands/sequence.h"
#include "access/detoast.h"
#include "utils/jsonb.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "catalog/partition.h"
}
#include "pg/guard.hpp"
#include "pg/compat.hpp"
#include "pg/envelope.hpp"

namespace pgbs::capture {

using shmem::StreamEntry;

namespace {

// A stream this transaction has registered a floor for.
struct TxStream {
  int64 stream_id;
  StreamEntry *entry;
  int64 max_id; // highest msg_id collected (0 = none)
  int64 floor;  // published floor: every id this transaction inserts must be above it
  int64 count;
  // Rows applied by logical replication (collect_applied): ids at or below
  // late_floor may be covered by cursors already sent; applied: some were
  // collected, so the commit starts the stream's hold.
  int64 late_floor;
  bool applied;
  int64 seq_last; // the queue sequence's last value as last read (check_drawn)
};

struct PendingRow {
  int64 stream_id;
  StreamEntry *entry;
  int64 msg_id;
  int nest_level;
  char *payload;  // data, event, visible_to back to back (TopTransactionContext), or NULL
  bool ephemeral; // no table row: never dropped from local memory
  uint32 data_len, event_len, visible_len;
  uint64 exclude; // broadcast's exclude: a connection id (0: none)
  bool late;      // applied at or below late_floor: announced, not streamed (Kind::Late)
};

Size record_size(const PendingRow *r) {
  return ring::record_size(r->data_len, r->event_len, r->visible_len);
}

constexpr int kMaxTxStreams = 256;

// Local memory one transaction's capture may use for its pending rows
// (PendingRow entries): past it, as past max_pending_events, the workers read
// the transaction's rows from the tables instead.
constexpr Size kRowsBudget = 32 * 1024 * 1024;

// Inline payloads of one transaction: what a quarter of the ring can carry.
Size inline_budget() { return shmem::ring_capacity() / 4; }

struct TxState {
  TxStream streams[kMaxTxStreams];
  int nstreams;
  bool registered; // this backend's slot holds entries
  bool overflowed; // more than max_pending_events: workers catch up from the tables
  bool catalog_changed;
  bool inline_full;  // the inline budget is spent: later rows are read from the table
  Size inline_bytes; // inline payload bytes collected (ring records included)
  PendingRow *rows;  // in TopMemoryContext
  int64 nrows;
  int64 cap;
};

TxState tx;

// Ids of this transaction's rows whose savepoint rolled back: written to the
// ring as Aborted records with the commit (or the abort), so that workers
// know them gone at once (docs/ARCHITECTURE.md, "The horizon"). A fixed
// array: a subtransaction's abort allocates nothing. Past it, ids are not
// recorded and stay holes until the horizon passes them.
constexpr int kMaxAbortedIds = 512;
struct AbortedId {
  int64 stream_id;
  int64 msg_id;
};
AbortedId aborted_ids[kMaxAbortedIds];
int naborted = 0;
// Highest msg_id the last AFTER trigger call collected in this backend (0:
// none): broadcast() returns it, so publishing needs INSERT only, not the
// SELECT that INSERT ... RETURNING would.
int64 last_captured_id = 0;

TxStream *find_tx_stream(int64 stream_id) {
  for (int i = 0; i < tx.nstreams; i++)
    if (tx.streams[i].stream_id == stream_id)
      return &tx.streams[i];
  return nullptr;
}

// Publishes a floor for stream_id in this backend's slot, before any msg_id of
// the statement is drawn from the sequence. Seqlock-style generation counter:
// the worker re-reads the slot if it changed while it was reading. Rows
// applied by logical replication bring their ids: their floor is the lower
// of the committed maximum and the stream's hold.
TxStream *register_stream(int64 stream_id, bool applied = false) {
  TxStream *ts = find_tx_stream(stream_id);
  if (ts)
    return ts;
  if (tx.nstreams >= kMaxTxStreams)
    ereport(ERROR,
            (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
             errmsg("pgbus_stream: a transaction can write to at most %d streams", kMaxTxStreams)));
  // Held until the transaction ends (release_streams), so it is not reused
  // while this backend's slot names the stream.
  StreamEntry *e = shmem::acquire_stream(MyDatabaseId, stream_id, shmem::kBackend);
  if (e == nullptr)
    ereport(ERROR,
            (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
             errmsg("pgbus_stream: more streams in use at once than shared memory can track"),
             errdetail("Every one of the pgbus_stream.max_streams entries is held by an "
                       "open transaction or a worker."),
             errhint("Raise pgbus_stream.max_streams and restart the server.")));
  shmem::slot_open(MyDatabaseId, !tx.registered);
  int64 floor = shmem::committed_max(e);
  const int64 now_us = applied ? (int64)GetCurrentTimestamp() : 0;
  if (applied) {
    const int64 hold = shmem::applied_hold(e, now_us);
    if (hold != shmem::kNoHold)
      floor = Min(floor, hold);
  }
  shmem::slot_publish(tx.nstreams, stream_id, floor); // before this statement draws any msg_id
  ts = &tx.streams[tx.nstreams++];
  ts->stream_id = stream_id;
  ts->entry = e;
  ts->max_id = 0;
  ts->floor = floor;
  ts->count = 0;
  ts->applied = false;
  ts->seq_last = 0;
  // Read again now that the slot is visible: a worker that did not see the
  // slot read the hold before this, and the hold only moves up.
  ts->late_floor = floor;
  if (applied) {
    const int64 hold = shmem::applied_hold(e, now_us);
    const int64 max = shmem::committed_max(e);
    ts->late_floor = hold == shmem::kNoHold ? max : Min(max, hold);
  }
  tx.registered = true;
  wal::log_floor(stream_id, floor); // before any id is drawn, like the slot
  return ts;
}

// Collects one committed-to-be event. Table rows may be dropped from local
// memory past max_pending_events (the workers then read the table); ephemeral
// ones (payload != NULL) have no row, so they are always kept and bounded by
// bytes in publish_ephemeral().
void collect(TxStream *ts, int64 msg_id, char *payload = nullptr, uint32 data_len = 0,
             uint32 event_len = 0, uint32 visible_len = 0, bool ephemeral = false,
             uint64 exclude = 0, bool late = false) {
  // The horizon may already have passed an id at or below the floor: a
  // subscriber would never get this row. Refused here, never skipped (a
  // replicated row cannot be refused: it is announced, collect_applied).
  if (msg_id <= ts->floor && !late)
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("pgbus_stream: msg_id " INT64_FORMAT " is not above " INT64_FORMAT
                    ", the highest id already committed to this stream",
                    msg_id, ts->floor),
             errdetail("Subscribers may already have been told that every id up to " INT64_FORMAT
                       " was delivered.",
                       ts->floor),
             errhint("Ids must be drawn from the queue's sequence in commit order: a sequence "
                     "with CACHE 1, no explicit ids, no setval backwards. To go on, move the "
                     "sequence above " INT64_FORMAT " with setval.",
                     ts->floor)));
  if (msg_id > ts->max_id)
    ts->max_id = msg_id;
  ts->count++;
  if (!ephemeral) {
    if (tx.overflowed)
      return;
    if (tx.nrows >= settings::max_pending_events() ||
        (Size)(tx.nrows + 1) * sizeof(PendingRow) > kRowsBudget) {
      tx.overflowed = true; // the workers will read this transaction's rows from the table
      int64 keep = 0;       // keep only the ephemeral events
      for (int64 i = 0; i < tx.nrows; i++)
        if (tx.rows[i].ephemeral)
          tx.rows[keep++] = tx.rows[i];
      tx.nrows = keep;
      return;
    }
  }
  if (tx.nrows >= tx.cap) {
    int64 ncap = tx.cap ? tx.cap * 2 : 64;
    const int64 most =
        Min((int64)settings::max_pending_events(), (int64)(kRowsBudget / sizeof(PendingRow)));
    if (ncap > most && !ephemeral)
      ncap = Max(most, tx.nrows + 1);
    tx.rows = tx.rows
                  ? (PendingRow *)repalloc(tx.rows, ncap * sizeof(PendingRow))
                  : (PendingRow *)MemoryContextAlloc(TopMemoryContext, ncap * sizeof(PendingRow));
    tx.cap = ncap;
  }
  PendingRow *r = &tx.rows[tx.nrows++];
  r->stream_id = ts->stream_id;
  r->entry = ts->entry;
  r->msg_id = msg_id;
  r->nest_level = GetCurrentTransactionNestLevel();
  r->payload = payload;
  r->ephemeral = ephemeral;
  r->data_len = data_len;
  r->event_len = event_len;
  r->visible_len = visible_len;
  r->exclude = exclude;
  r->late = late;
}

void clear_slot() {
  if (!tx.registered)
    return;
  shmem::slot_clear();
}

// Gives back the stream entries this transaction held (after its commit was
// published or its slot cleared).
void release_streams() {
  for (int i = 0; i < tx.nstreams; i++)
    shmem::release_stream(tx.streams[i].entry, shmem::kBackend);
  tx.nstreams = 0;
}

void reset_tx() {
  release_streams();
  tx.registered = false;
  tx.overflowed = false;
  tx.catalog_changed = false;
  tx.inline_full = false;
  tx.inline_bytes = 0;
  tx.nrows = 0;
  naborted = 0;
  if (tx.cap > 4096) { // do not keep a large buffer between transactions
    pfree(tx.rows);
    tx.rows = nullptr;
    tx.cap = 0;
  }
}

// Wakes the workers that have a connection on a stream this transaction
// wrote to that takes its rows live (shmem::wake_mask), and any
// worker that has fallen a quarter of the ring behind (so
// that it is never lapped for want of a wake-up); every worker when the
// catalog changed or events had to bypass the ring. A worker without
// subscribers is thus not woken on every commit, nor one that reads the ring
// on its timer (worker_polling): it reads this commit within a millisecond.
void wake_workers(bool all) {
  uint32 mask = 0;
  pg_memory_barrier(); // the ring write is visible before the masks are read
  if (!all)
    for (int i = 0; i < tx.nstreams; i++)
      mask |= shmem::wake_mask(tx.streams[i].entry);
  shmem::wake_workers(mask, all);
}

// The ring record of r, but for its ephemeral sequence number.
void fill_header(ring::Header *h, const PendingRow *r) {
  h->len = (uint32)record_size(r);
  h->kind = r->late        ? ring::Kind::Late
            : r->ephemeral ? ring::Kind::Inline
            : r->payload   ? ring::Kind::RowInline
                           : ring::Kind::Row;
  h->stream_id = r->stream_id;
  h->msg_id = r->msg_id;
  h->data_len = r->data_len;
  h->event_len = r->event_len;
  h->visible_len = r->visible_len;
  h->exclude = r->exclude;
}

// XACT_EVENT_PRE_COMMIT: the memory the WAL copy of the commit needs.
void reserve_wal() {
  Size need = 0;
  if (!tx.overflowed)
    for (int64 i = 0; i < tx.nrows; i++)
      need += record_size(&tx.rows[i]);
  wal::reserve(tx.nstreams, need);
}

// The commit's events for nodes that replay this WAL (capture/wal.hpp), after
// the commit record. Nothing here may fail.
void log_commit(bool fits) {
  if (!wal::enabled())
    return;
  wal::begin_commit(MyDatabaseId, tx.catalog_changed, tx.overflowed || !fits);
  for (int i = 0; i < tx.nstreams; i++)
    wal::add_stream(tx.streams[i].stream_id, tx.streams[i].max_id, tx.streams[i].count);
  ring::Header h;
  memset(&h, 0, sizeof(h));
  h.dboid = MyDatabaseId;
  h.commit_us = (int64)GetCurrentTimestamp();
  for (int64 i = 0; i < tx.nrows; i++) {
    fill_header(&h, &tx.rows[i]);
    wal::add_record(h, tx.rows[i].payload, fits);
  }
  wal::finish_commit();
}

// Whether a row's id may be announced as rolled back: not one logical
// replication applied (the apply worker retries a failed transaction with the
// publisher's ids).
bool abort_recordable(int64 stream_id, bool late) {
  if (late)
    return false;
  const TxStream *ts = find_tx_stream(stream_id);
  return ts != nullptr && !ts->applied;
}

int compare_aborted(const void *a, const void *b) {
  const AbortedId *x = (const AbortedId *)a, *y = (const AbortedId *)b;
  if (x->stream_id != y->stream_id)
    return x->stream_id < y->stream_id ? -1 : 1;
  return x->msg_id < y->msg_id ? -1 : x->msg_id > y->msg_id ? 1 : 0;
}

int compare_rows(const void *a, const void *b) {
  const PendingRow *x = (const PendingRow *)a, *y = (const PendingRow *)b;
  if (x->stream_id != y->stream_id)
    return x->stream_id < y->stream_id ? -1 : 1;
  return x->msg_id < y->msg_id ? -1 : x->msg_id > y->msg_id ? 1 : 0;
}

// Writes one Aborted ring record per run of consecutive ids in ids[0, n)
// (sorted by stream, then id; at(i, &stream, &id) is false for an id not to
// announce). Nothing is written when the runs need more than an eighth of the
// ring: those ids stay holes until the horizon passes them. Nothing here may
// fail or allocate. Returns whether anything was written.
template <typename At> bool write_aborted(int64 n, At at) {
  const Size one = ring::record_size(0, 0, 0);
  for (int pass = 0; pass < 2; pass++) {
    Size need = 0;
    shmem::RingAppend append{};
    ring::Header h;
    memset(&h, 0, sizeof(h));
    h.len = (uint32)one;
    h.kind = ring::Kind::Aborted;
    h.dboid = MyDatabaseId;
    h.commit_us = (int64)GetCurrentTimestamp();
    if (pass == 1)
      append = shmem::ring_append_begin();
    int64 stream = 0, lo = 0, hi = 0;
    bool open = false;
    auto flush = [&]() {
      if (!open)
        return;
      need += one;
      if (pass == 1) {
        h.stream_id = stream;
        h.msg_id = lo;
        h.exclude = (uint64)hi;
        append.put(h, nullptr);
      }
      open = false;
    };
    for (int64 i = 0; i < n; i++) {
      int64 sid, id;
      if (!at(i, &sid, &id))
        continue;
      if (open && sid == stream && id >= lo && id <= hi + 1) {
        hi = Max(hi, id);
        continue;
      }
      flush();
      stream = sid;
      lo = hi = id;
      open = true;
    }
    flush();
    if (pass == 0 && (need == 0 || need > shmem::ring_capacity() / 8))
      return false;
    if (pass == 1)
      shmem::ring_append_end(append);
  }
  return true;
}

// The ids of savepoints that rolled back (aborted_ids).
bool write_aborted_savepoints() {
  qsort(aborted_ids, naborted, sizeof(AbortedId), compare_aborted);
  return write_aborted(naborted, [](int64 i, int64 *sid, int64 *id) {
    *sid = aborted_ids[i].stream_id;
    *id = aborted_ids[i].msg_id;
    return true;
  });
}

// Runs at XACT_EVENT_ABORT of a transaction that published floors: its rows
// will never be visible. Their ids go into the ring as Aborted records, and
// the committed maximum of each stream rises to the highest of them (an id
// tokens may cover is never inserted again: an explicit one is refused).
// Nothing here may fail or allocate.
void publish_abort() {
  bool any = false;
  if (tx.nrows > 0) {
    qsort(tx.rows, tx.nrows, sizeof(PendingRow), compare_rows);
    any = write_aborted(tx.nrows, [](int64 i, int64 *sid, int64 *id) {
      *sid = tx.rows[i].stream_id;
      *id = tx.rows[i].msg_id;
      return abort_recordable(*sid, tx.rows[i].late);
    });
  }
  if (naborted > 0)
    any = write_aborted_savepoints() || any;
  for (int i = 0; i < tx.nstreams; i++) {
    TxStream *ts = &tx.streams[i];
    if (ts->max_id > 0 && !ts->applied)
      shmem::advance_max_committed(ts->entry, ts->max_id);
  }
  if (any)
    wake_workers(false);
}

// Runs at XACT_EVENT_COMMIT: nothing here may fail.
void publish_commit() {
  // Before the committed maxima move: no horizon passes these rows' ids
  // before the hold is in force.
  for (int i = 0; i < tx.nstreams; i++)
    if (tx.streams[i].applied)
      shmem::applied_hold_start(tx.streams[i].entry, (int64)GetCurrentTimestamp(),
                                (int64)settings::logical_hold_ms() * 1000);
  Size need = 0;
  for (int64 i = 0; i < tx.nrows; i++)
    need += record_size(&tx.rows[i]);
  bool fits = need <= shmem::ring_capacity() / 2;
  if (tx.overflowed || !fits)
    shmem::ring_overflow();
  if (tx.nrows > 0) {
    ring::Header h;
    memset(&h, 0, sizeof(h));
    h.dboid = MyDatabaseId;
    h.commit_us = (int64)GetCurrentTimestamp();
    shmem::RingAppend append = shmem::ring_append_begin();
    for (int64 i = 0; i < tx.nrows; i++) {
      const PendingRow *r = &tx.rows[i];
      // Ephemeral broadcasts are numbered in ring order, also when they do
      // not fit: the gap in the numbers tells the workers they were lost.
      h.ephemeral_seq = r->ephemeral ? shmem::next_ephemeral_seq(r->entry) : 0;
      if (!fits)
        continue;
      fill_header(&h, r);
      append.put(h, r->payload);
    }
    shmem::ring_append_end(append);
  }
  if (naborted > 0) // before the maxima, which cover these ids too
    write_aborted_savepoints();
  for (int i = 0; i < tx.nstreams; i++) {
    TxStream *ts = &tx.streams[i];
    if (ts->max_id > 0)
      shmem::advance_max_committed(ts->entry, ts->max_id);
    shmem::count_events(ts->entry, (uint64)ts->count);
  }
  clear_slot();
  if (tx.catalog_changed)
    shmem::catalog_changed();
  wake_workers(tx.catalog_changed || tx.overflowed || !fits);
  log_commit(fits);
}

void on_xact(XactEvent event, void *) {
  switch (event) {
  case XACT_EVENT_PRE_PREPARE:
    if (tx.registered)
      ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                      errmsg("pgbus_stream: cannot PREPARE a transaction that wrote to a stream")));
    break;
  case XACT_EVENT_PRE_COMMIT:
    if (tx.registered || tx.catalog_changed)
      reserve_wal();
    break;
  case XACT_EVENT_COMMIT:
    if (tx.registered || tx.catalog_changed)
      publish_commit();
    reset_tx();
    wal::reset();
    break;
  case XACT_EVENT_ABORT:
    if (tx.registered)
      publish_abort(); // before the slot is cleared: no horizon passes these ids first
    clear_slot();
    reset_tx();
    wal::reset();
    break;
  case XACT_EVENT_PREPARE:
    clear_slot();
    reset_tx();
    wal::reset();
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
    // Rows of the aborted subtransaction (and its children) sit at the tail;
    // their ids are announced as rolled back with the transaction's end.
    while (tx.nrows > 0 && tx.rows[tx.nrows - 1].nest_level >= level) {
      const PendingRow *r = &tx.rows[--tx.nrows];
      if (naborted < kMaxAbortedIds && abort_recordable(r->stream_id, r->late))
        aborted_ids[naborted++] = {r->stream_id, r->msg_id};
    }
  } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
    for (int64 i = tx.nrows - 1; i >= 0 && tx.rows[i].nest_level >= level; i--)
      tx.rows[i].nest_level = level - 1;
  }
}

// Copies the message's data/event/visible_to into transaction memory so the
// workers need not read the row back: the pgbus envelope's fields, or the
// JSON text of any other message. Returns NULL when the row is to be read by
// the worker (larger than inline_payload_max, or the budget is spent).
char *inline_payload(Datum message, uint32 *data_len, uint32 *event_len, uint32 *visible_len,
                     uint64 *exclude) {
  // Budgeted before anything is converted: the JSON text is about the size of
  // the stored value, and a statement of many rows must not convert them all
  // only to find the budget spent.
  const Size raw = toast_raw_datum_size(message);
  if (raw > (Size)settings::inline_payload_max())
    return nullptr;
  if (tx.inline_bytes + raw + sizeof(ring::Header) > inline_budget()) {
    tx.inline_full = true;
    return nullptr;
  }
  // The envelope's rule (pg/envelope.hpp), as the worker reads rows back.
  pgbs::pg::Envelope env;
  pgbs::pg::read_envelope(DatumGetJsonbP(message), &env);
  const char *parts[3] = {env.text[env.Data], env.text[env.Event], env.text[env.VisibleTo]};
  const int lens[3] = {(int)env.len[env.Data], (int)env.len[env.Event],
                       (int)env.len[env.VisibleTo]};
  // An exclude that names no connection excludes none, as for a row read back.
  if (env.text[env.Exclude] == nullptr ||
      !pgbs::wire::parse_connection_id(
          std::string_view(env.text[env.Exclude], env.len[env.Exclude]), exclude))
    *exclude = 0;
  Size total = (Size)lens[0] + lens[1] + lens[2];
  if (tx.inline_bytes + total + sizeof(ring::Header) > inline_budget()) {
    tx.inline_full = true;
    return nullptr;
  }
  char *payload = (char *)MemoryContextAlloc(TopTransactionContext, total + 1);
  Size off = 0;
  for (int i = 0; i < 3; i++) {
    if (lens[i] > 0)
      memcpy(payload + off, parts[i], lens[i]);
    off += lens[i];
  }
  tx.inline_bytes += total + sizeof(ring::Header);
  *data_len = (uint32)lens[0];
  *event_len = (uint32)lens[1];
  *visible_len = (uint32)lens[2];
  return payload;
}

// Whether the rows of ts get payload copies in the ring. A stream nobody
// watches (the gem's job queues share its prefix) gets none: a subscriber
// arriving before the commit has its worker read the rows back, and the ring
// keeps room for watched streams.
bool wants_payload(const TxStream *ts) {
  return pgbs::settings::inline_payload_max() > 0 && !tx.overflowed && !tx.inline_full &&
         shmem::watched_by_workers(ts->entry);
}

// One captured row: its msg_id and the payload of `message`, which callers
// read only when wants_payload (nullptr: a NULL message, or not read).
void collect_row(TxStream *ts, int64 msg_id, const Datum *message) {
  char *payload = nullptr;
  uint32 lens[3] = {0, 0, 0};
  uint64 exclude = 0;
  if (message != nullptr)
    payload = inline_payload(*message, &lens[0], &lens[1], &lens[2], &exclude);
  collect(ts, msg_id, payload, lens[0], lens[1], lens[2], false, payload ? exclude : 0);
}

} // namespace

void install_callbacks() {
  memset(&tx, 0, sizeof(tx));
  RegisterXactCallback(on_xact, nullptr);
  RegisterSubXactCallback(on_subxact, nullptr);
  install_floor_hooks();
  install_extension_hook();
}

void publish_floor(int64_t stream_id, unsigned int relid, unsigned int fn) {
  check_stream_table(stream_id, relid, fn);
  register_stream(stream_id);
  last_captured_id = 0; // a new statement: _captured_id() names its rows only
}

void note_catalog_change() { tx.catalog_changed = true; }

void collect_applied(int64_t stream_id, int64_t msg_id, uintptr_t message) {
  static LocalTransactionId warned = InvalidLocalTransactionId;
  TxStream *ts = register_stream(stream_id, true);
  if (msg_id <= ts->late_floor) {
    if (warned != pg::my_local_xid())
      ereport(WARNING,
              (errmsg("pgbus_stream: replicated msg_id " INT64_FORMAT " is not above " INT64_FORMAT
                      ", what cursors of this stream may already cover: its subscribers here "
                      "are told it is missing instead",
                      msg_id, ts->late_floor),
               errhint("On the publisher, ids of this queue were committed out of order, further "
                       "apart than pgbus_stream.logical_hold.")));
    warned = pg::my_local_xid();
    collect(ts, msg_id, nullptr, 0, 0, 0, false, 0, true);
    return;
  }
  ts->applied = true;
  const Datum m = (Datum)message;
  collect_row(ts, msg_id, message != 0 && wants_payload(ts) ? &m : nullptr);
}

namespace {

// Refuses an id the queue's sequence has not handed out (an explicit msg_id
// above its last value): committed, it would raise the stream's committed
// maximum above every id the sequence will draw, and every later insert
// would be refused (docs/ARCHITECTURE.md, "Ids and commit order").
void check_drawn(TxStream *ts, const QueueColumns &cols, Relation rel, int64 id) {
  if (cols.seq == 0 || id <= ts->seq_last)
    return;
  ts->seq_last = sequence_last_value(cols.seq);
  if (id <= ts->seq_last)
    return;
  ereport(ERROR,
          (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
           errmsg("pgbus_stream: msg_id " INT64_FORMAT " is above " INT64_FORMAT
                  ", the last value of the sequence of queue table \"%s\"",
                  id, ts->seq_last, RelationGetRelationName(rel)),
           errdetail("Committed, it would refuse every id the sequence draws later."),
           errhint("Let the sequence draw msg_id, or give explicit ids at or below its last value "
                   "(move it first with setval).")));
}

// The AFTER INSERT FOR EACH ROW trigger: one inserted row, read from the
// trigger's tuple. The after-trigger queue holds only its tid, and no
// transition table (a tuplestore copy of every row) is built.
void capture_after_row(TriggerData *td, TxStream *ts) {
  HeapTuple tuple = td->tg_trigtuple;
  TupleDesc desc = RelationGetDescr(td->tg_relation);
  bool isnull;
  const QueueColumns cols = queue_columns(td->tg_relation); // types checked
  const Datum id = heap_getattr(tuple, cols.msg_id, desc, &isnull);
  if (isnull)
    return;
  check_drawn(ts, cols, td->tg_relation, DatumGetInt64(id));
  last_captured_id = Max(last_captured_id, DatumGetInt64(id));
  Datum message = 0;
  bool have_message = false;
  if (wants_payload(ts) && cols.message > 0) {
    message = heap_getattr(tuple, cols.message, desc, &isnull);
    have_message = !isnull;
  }
  // Detoasted values and JSON text live in the trigger's per-tuple context,
  // reset after this call.
  collect_row(ts, DatumGetInt64(id), have_message ? &message : nullptr);
}

// The AFTER INSERT FOR EACH STATEMENT trigger with REFERENCING NEW TABLE of
// queues hooked by 0.1.0 and not yet upgraded: every row of the statement
// from the transition table.
void capture_after_statement(TriggerData *td, TxStream *ts) {
  Tuplestorestate *rows = td->tg_newtable;
  if (rows == nullptr)
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("pgbus_stream._capture() AFTER trigger needs REFERENCING NEW TABLE")));
  TupleDesc desc = RelationGetDescr(td->tg_relation);
  const QueueColumns cols = queue_columns(td->tg_relation); // types checked
  const int attnum = cols.msg_id;
  const int message_attnum = pgbs::settings::inline_payload_max() > 0 ? cols.message : 0;
  TupleTableSlot *slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
  // Our own read pointer, from the start: other triggers may have read the
  // transition table already. Rewinding needs EXEC_FLAG_REWIND (which
  // transition tables support).
  int ptr = tuplestore_alloc_read_pointer(rows, EXEC_FLAG_REWIND);
  tuplestore_select_read_pointer(rows, ptr);
  tuplestore_rescan(rows);
  // Detoasted values and JSON text of one row live until the next row only.
  MemoryContext row_cxt =
      AllocSetContextCreate(CurrentMemoryContext, "pgbus_stream capture row", ALLOCSET_SMALL_SIZES);
  while (tuplestore_gettupleslot(rows, true, false, slot)) {
    bool isnull;
    Datum d = slot_getattr(slot, attnum, &isnull);
    if (isnull)
      continue;
    check_drawn(ts, cols, td->tg_relation, DatumGetInt64(d));
    last_captured_id = Max(last_captured_id, DatumGetInt64(d));
    bool mnull = true;
    Datum m = message_attnum > 0 && wants_payload(ts) ? slot_getattr(slot, message_attnum, &mnull)
                                                      : (Datum)0;
    MemoryContext old = MemoryContextSwitchTo(row_cxt);
    collect_row(ts, DatumGetInt64(d), mnull ? nullptr : &m);
    MemoryContextSwitchTo(old);
    MemoryContextReset(row_cxt);
  }
  MemoryContextDelete(row_cxt);
  tuplestore_select_read_pointer(rows, 0);
  ExecDropSingleTupleTableSlot(slot);
}

} // namespace

} // namespace pgbs::capture

using namespace pgbs::capture;

// pgbus_stream._capture(stream_id): AFTER INSERT FOR EACH ROW collects each
// inserted row (in replica role as an applied one). On a queue hooked by
// 0.1.0 and not yet upgraded, BEFORE INSERT FOR EACH STATEMENT publishes the
// floor and AFTER INSERT FOR EACH STATEMENT collects the rows from the
// transition table.
PGBS_SQL_FUNCTION(pgbus_stream_capture) {
  if (!CALLED_AS_TRIGGER(fcinfo))
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("pgbus_stream._capture() must be called as a trigger")));
  TriggerData *td = (TriggerData *)fcinfo->context;
  const bool row = TRIGGER_FIRED_FOR_ROW(td->tg_event);
  if (!TRIGGER_FIRED_BY_INSERT(td->tg_event) || (row && !TRIGGER_FIRED_AFTER(td->tg_event)) ||
      td->tg_trigger->tgnargs != 1)
    ereport(ERROR,
            (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
             errmsg("pgbus_stream._capture() must be a BEFORE INSERT FOR EACH STATEMENT or an "
                    "AFTER INSERT trigger with the stream id as its argument")));
  const int64 stream_id = trigger_stream_id(td->tg_trigger->tgoid, td->tg_trigger->tgargs[0]);
  Oid relid = RelationGetRelid(td->tg_relation);
  // A partition fires the clone of its partitioned table's row trigger: the
  // catalog names the partitioned table (a queue's, which is not a partition).
  if (row && td->tg_trigger->tgisclone)
    relid = llast_oid(get_partition_ancestors(relid));
  check_stream_table(stream_id, relid, fcinfo->flinfo->fn_oid);
  if (row) {
    // The trigger is enabled ALWAYS: in replica role the row was applied by
    // logical replication and keeps the publisher's id (applied.cpp). Else
    // the floor hooks published the floor before the statement drew ids
    // (floor_hook.cpp).
    if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
      capture_applied_row(td, stream_id);
    else
      capture_after_row(td, register_stream(stream_id));
    return PointerGetDatum(NULL);
  }
  // A queue hooked by 0.1.0: the BEFORE trigger publishes the floor.
  TxStream *ts = register_stream(stream_id);
  last_captured_id = 0;
  if (!TRIGGER_FIRED_BEFORE(td->tg_event))
    capture_after_statement(td, ts);
  return PointerGetDatum(NULL);
}

namespace {

// An event without a table row: its id comes from the queue's sequence
// (after the floor is published, like any insert; check_permissions as
// nextval() would), its payload (data, event, visible_to, any NULL but data)
// travels in the ring at commit.
int64 publish_inline(int64 stream_id, Oid seq, bool check_permissions, text *const parts[3],
                     uint64 exclude) {
  uint32 lens[3];
  Size total = 0;
  for (int i = 0; i < 3; i++) {
    lens[i] = parts[i] ? (uint32)VARSIZE_ANY_EXHDR(parts[i]) : 0;
    total += lens[i];
  }
  Size limit = pgbs::shmem::ring_capacity() / 4;
  if (tx.inline_bytes + total + sizeof(pgbs::ring::Header) > limit)
    ereport(
        ERROR,
        (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
         errmsg("pgbus_stream: ephemeral broadcasts of one transaction exceed %zu bytes", limit),
         errhint("Use durable broadcasts for large payloads, or raise pgbus_stream.ring_size.")));
  TxStream *ts = register_stream(stream_id);
  int64 id = nextval_internal(seq, check_permissions);
  char *payload = (char *)MemoryContextAlloc(TopTransactionContext, total + 1);
  Size off = 0;
  for (int i = 0; i < 3; i++)
    if (parts[i]) {
      memcpy(payload + off, VARDATA_ANY(parts[i]), lens[i]);
      off += lens[i];
    }
  tx.inline_bytes += total + sizeof(pgbs::ring::Header);
  collect(ts, id, payload, lens[0], lens[1], lens[2], true, exclude);
  return id;
}

} // namespace

// pgbus_stream._publish_ephemeral(stream_id, seq, data, event, visible_to):
// the 0.1.0 interface (called by 0.1.0's SECURITY DEFINER broadcast only).
PGBS_SQL_FUNCTION(pgbus_stream_publish_ephemeral) {
  if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("pgbus_stream: stream, sequence and data must not be NULL")));
  text *parts[3] = {PG_GETARG_TEXT_PP(2), PG_ARGISNULL(3) ? nullptr : PG_GETARG_TEXT_PP(3),
                    PG_ARGISNULL(4) ? nullptr : PG_GETARG_TEXT_PP(4)};
  PG_RETURN_INT64(publish_inline(PG_GETARG_INT64(0), PG_GETARG_OID(1), true, parts, 0));
}

// pgbus_stream._publish(stream_id, queue, data, event, visible_to, exclude):
// an ephemeral broadcast, for a caller allowed to INSERT into the stream's
// queue, into that very stream.
PGBS_SQL_FUNCTION(pgbus_stream_publish) {
  if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("pgbus_stream: stream, queue and data must not be NULL")));
  int64 stream_id = PG_GETARG_INT64(0);
  Oid queue = PG_GETARG_OID(1);
  if (pg_class_aclcheck(queue, GetUserId(), ACL_INSERT) != ACLCHECK_OK)
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("pgbus_stream: permission denied to broadcast to this stream"),
                    errhint("GRANT INSERT ON the stream's queue table to the publishing role.")));
  check_stream_table(stream_id, queue, fcinfo->flinfo->fn_oid);
  uint64 exclude = 0;
  if (!PG_ARGISNULL(5)) {
    text *ex = PG_GETARG_TEXT_PP(5);
    if (!pgbs::wire::parse_connection_id(std::string_view(VARDATA_ANY(ex), VARSIZE_ANY_EXHDR(ex)),
                                         &exclude))
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("pgbus_stream: invalid connection id to exclude")));
  }
  List *owned = getOwnedSequences(queue);
  if (list_length(owned) != 1)
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("pgbus_stream: queue %s has no msg_id sequence", get_rel_name(queue))));
  text *parts[3] = {PG_GETARG_TEXT_PP(2), PG_ARGISNULL(3) ? nullptr : PG_GETARG_TEXT_PP(3),
                    PG_ARGISNULL(4) ? nullptr : PG_GETARG_TEXT_PP(4)};
  // INSERT on the queue is what it takes, as for an identity column.
  PG_RETURN_INT64(publish_inline(stream_id, linitial_oid(owned), false, parts, exclude));
}

// pgbus_stream._captured_id(): the msg_id of the row the last captured INSERT
// of this backend wrote (its highest, for several rows; 0 if none).
PGBS_SQL_FUNCTION(pgbus_stream_captured_id) { PG_RETURN_INT64(last_captured_id); }

// pgbus_stream._draw_id(stream_id, queue): the msg_id of the row broadcast()
// is about to insert into the stream's queue, drawn from the queue's
// sequence after this transaction's floor is published (as an insert's
// would be), for a caller allowed to INSERT into that very queue. The id is
// known whether or not the queue has its capture trigger yet (an
// auto-attached queue is hooked at its first subscription).
PGBS_SQL_FUNCTION(pgbus_stream_draw_id) {
  if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                    errmsg("pgbus_stream: stream and queue must not be NULL")));
  const int64 stream_id = PG_GETARG_INT64(0);
  const Oid queue = PG_GETARG_OID(1);
  if (pg_class_aclcheck(queue, GetUserId(), ACL_INSERT) != ACLCHECK_OK)
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("pgbus_stream: permission denied to broadcast to this stream"),
                    errhint("GRANT INSERT ON the stream's queue table to the publishing role.")));
  check_stream_table(stream_id, queue, fcinfo->flinfo->fn_oid);
  List *owned = getOwnedSequences(queue);
  if (list_length(owned) != 1)
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("pgbus_stream: queue %s has no msg_id sequence", get_rel_name(queue))));
  register_stream(stream_id); // the floor first, then the id
  const int64 id = nextval_internal(linitial_oid(owned), false);
  TxStream *ts = find_tx_stream(stream_id);
  ts->seq_last = Max(ts->seq_last, id); // drawn here: check_drawn need not read it back
  PG_RETURN_INT64(id);
}
