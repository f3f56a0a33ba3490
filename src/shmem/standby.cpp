// The standby floor table (see standby.hpp).
#define PGBS_SHMEM_LAYOUT // src/shmem: the layout is ours
#include "shmem/layout.hpp"

// clang-format off: miscadmin.h must come first here
extern "C" {
#include "miscadmin.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "access/twophase.h"
#include "storage/proc.h"
#include "storage/shmem.h"
}
// clang-format on

namespace pgbs::shmem {

static StandbyFloors *g_floors = nullptr;

static int floor_capacity() { return 2 * (MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts); }

Size standby_size() {
  return add_size(offsetof(StandbyFloors, items), mul_size(floor_capacity(), sizeof(StandbyFloor)));
}

void standby_request() {
  RequestAddinShmemSpace(standby_size());
  RequestNamedLWLockTranche("pgbus_stream standby", 1);
}

void standby_startup() {
  bool found;
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  g_floors = (StandbyFloors *)ShmemInitStruct("pgbus_stream standby", standby_size(), &found);
  if (!found) {
    g_floors->lock = &GetNamedLWLockTranche("pgbus_stream standby")[0].lock;
    g_floors->capacity = floor_capacity();
    pg_atomic_init_u32(&g_floors->used, 0);
    g_floors->overflow_xid = InvalidTransactionId;
    pg_atomic_init_u64(&g_floors->overflows, 0);
    pg_atomic_init_u64(&g_floors->swept, 0);
    pg_atomic_init_u64(&g_floors->read_lsn, 0);
    pg_atomic_init_u32(&g_floors->reader, kReaderCatchingUp);
    for (int i = 0; i < g_floors->capacity; i++)
      g_floors->items[i].xid = InvalidTransactionId;
  }
  LWLockRelease(AddinShmemInitLock);
}

StandbyFloors *standby_floors() { return g_floors; }

ReaderPhase standby_reader_phase() { return (ReaderPhase)pg_atomic_read_u32(&g_floors->reader); }

void set_standby_reader_phase(ReaderPhase phase) { pg_atomic_write_u32(&g_floors->reader, phase); }

uint64 standby_read_lsn() { return pg_atomic_read_u64(&g_floors->read_lsn); }

void set_standby_read_lsn(uint64 lsn) { pg_atomic_write_u64(&g_floors->read_lsn, lsn); }

bool standby_floors_held() {
  return pg_atomic_read_u32(&g_floors->used) != 0 || TransactionIdIsValid(g_floors->overflow_xid);
}

StandbyFigures standby_figures() {
  StandbyFigures f;
  f.used = (int32)pg_atomic_read_u32(&g_floors->used);
  f.overflows = pg_atomic_read_u64(&g_floors->overflows);
  f.swept = pg_atomic_read_u64(&g_floors->swept);
  return f;
}

// Entries in use are items[0, used): a lookup visits only transactions in
// flight, not the whole table. Under the lock.
static int nused() { return (int)pg_atomic_read_u32(&g_floors->used); }

static StandbyFloor *find(TransactionId xid) {
  for (int i = 0; i < nused(); i++)
    if (g_floors->items[i].xid == xid)
      return &g_floors->items[i];
  return nullptr;
}

void standby_add_floor(TransactionId xid, Oid dboid, int64 stream_id, int64 floor) {
  StandbyFloors *f = g_floors;
  LWLockAcquire(f->lock, LW_EXCLUSIVE);
  StandbyFloor *e = find(xid);
  if (e == nullptr && nused() < f->capacity) {
    e = &f->items[nused()];
    e->xid = xid;
    e->dboid = dboid;
    e->count = 0;
    e->wildcard = false;
    e->committed_seen_us = 0;
    pg_atomic_fetch_add_u32(&f->used, 1);
  }
  if (e == nullptr) {
    if (!TransactionIdIsValid(f->overflow_xid) || TransactionIdPrecedes(f->overflow_xid, xid))
      f->overflow_xid = xid;
    pg_atomic_fetch_add_u64(&f->overflows, 1);
  } else if (e->count < (uint32)kSlotStreams) {
    e->entries[e->count].stream_id = stream_id;
    e->entries[e->count].floor = floor;
    e->count++;
  } else {
    e->wildcard = true;
  }
  LWLockRelease(f->lock);
}

// Moves the last entry in use into e's place.
static void drop_locked(StandbyFloor *e) {
  StandbyFloor *last = &g_floors->items[nused() - 1];
  if (e != last)
    memcpy((void *)e, last, offsetof(StandbyFloor, entries) + last->count * sizeof(SlotEntry));
  last->xid = InvalidTransactionId;
  pg_atomic_fetch_sub_u32(&g_floors->used, 1);
}

void standby_clear(TransactionId xid) {
  StandbyFloors *f = g_floors;
  if (pg_atomic_read_u32(&f->used) == 0)
    return;
  LWLockAcquire(f->lock, LW_EXCLUSIVE);
  if (StandbyFloor *e = find(xid))
    drop_locked(e);
  LWLockRelease(f->lock);
}

// True while the WAL reader's state may miss what this node replayed: its
// first pass (floors not read yet), and after a promotion until it has read
// the last replayed message (commits not applied yet, while this node's
// own commits already raise the maxima).
static bool reader_behind() {
  const uint32 phase = pg_atomic_read_u32(&g_floors->reader);
  return phase == kReaderCatchingUp || (phase == kReaderLive && !RecoveryInProgress());
}

bool standby_copy_floors(Oid dboid, std::vector<SlotEntry> *out) {
  StandbyFloors *f = g_floors;
  const bool behind = reader_behind();
  if (pg_atomic_read_u32(&f->used) == 0 && !TransactionIdIsValid(f->overflow_xid))
    return behind;
  bool frozen = behind;
  LWLockAcquire(f->lock, LW_SHARED);
  frozen = frozen || TransactionIdIsValid(f->overflow_xid);
  for (int i = 0; i < nused(); i++) {
    const StandbyFloor &e = f->items[i];
    if (!TransactionIdIsValid(e.xid) || e.dboid != dboid)
      continue;
    if (e.wildcard)
      frozen = true;
    out->insert(out->end(), e.entries, e.entries + e.count);
  }
  LWLockRelease(f->lock);
  return frozen;
}

void standby_held_xids(std::vector<FloorXid> *out, TransactionId *overflow_xid) {
  StandbyFloors *f = g_floors;
  out->clear();
  LWLockAcquire(f->lock, LW_SHARED);
  *overflow_xid = f->overflow_xid;
  for (int i = 0; i < nused(); i++)
    out->push_back({f->items[i].xid, f->items[i].committed_seen_us});
  LWLockRelease(f->lock);
}

void standby_drop(TransactionId xid) {
  StandbyFloors *f = g_floors;
  LWLockAcquire(f->lock, LW_EXCLUSIVE);
  if (StandbyFloor *e = find(xid)) {
    drop_locked(e);
    pg_atomic_fetch_add_u64(&f->swept, 1);
  }
  LWLockRelease(f->lock);
}

void standby_mark_committed(TransactionId xid, int64 now_us) {
  StandbyFloors *f = g_floors;
  LWLockAcquire(f->lock, LW_EXCLUSIVE);
  StandbyFloor *e = find(xid);
  if (e && e->committed_seen_us == 0)
    e->committed_seen_us = now_us;
  LWLockRelease(f->lock);
}

void standby_hold_until(TransactionId xid) {
  StandbyFloors *f = g_floors;
  LWLockAcquire(f->lock, LW_EXCLUSIVE);
  if (!TransactionIdIsValid(f->overflow_xid) || TransactionIdPrecedes(f->overflow_xid, xid))
    f->overflow_xid = xid;
  LWLockRelease(f->lock);
}

void standby_clear_overflow(TransactionId xid) {
  StandbyFloors *f = g_floors;
  LWLockAcquire(f->lock, LW_EXCLUSIVE);
  if (f->overflow_xid == xid)
    f->overflow_xid = InvalidTransactionId;
  LWLockRelease(f->lock);
}

} // namespace pgbs::shmem
