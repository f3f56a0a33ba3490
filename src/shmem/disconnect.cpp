// The disconnect() mailbox (see disconnect.hpp).
#include "shmem/disconnect.hpp"
#define PGBS_SHMEM_LAYOUT // src/shmem: the layout is ours
#include "shmem/layout.hpp"
#include "shmem/ring.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

namespace pgbs::shmem {
namespace {

struct Slot {
  uint64 seq; // 0: never used
  uint64 conn_id;
  char sub[sizeof(DisconnectWanted::sub)];
  pg_atomic_uint64 ended; // summed over the workers that handled it
};

struct Mailbox {
  slock_t mutex; // guards posted and the slots' fields but `ended` (copies only)
  uint64 posted; // requests ever posted; request n lives in slots[n % kDisconnectSlots]
  Slot slots[kDisconnectSlots];
  pg_atomic_uint64 done[kMaxWorkers]; // the last request each worker handled
};

Mailbox *g_box = nullptr;

bool worker_running(int w) { return pg_atomic_read_u32(&shared()->worker_pid[w]) != 0; }

// The oldest request some running worker has not handled (posted + 1: none).
uint64 oldest_unhandled(uint64 posted) {
  uint64 oldest = posted + 1;
  for (int w = 0; w < kMaxWorkers; w++)
    if (worker_running(w)) {
      const uint64 d = pg_atomic_read_u64(&g_box->done[w]);
      if (d + 1 < oldest)
        oldest = d + 1;
    }
  return oldest;
}

void nap() {
  (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10, PG_WAIT_EXTENSION);
  ResetLatch(MyLatch);
  CHECK_FOR_INTERRUPTS();
}

} // namespace

Size disconnect_size() { return MAXALIGN(sizeof(Mailbox)); }

void disconnect_request() { RequestAddinShmemSpace(disconnect_size()); }

void disconnect_startup() {
  bool found;
  g_box = (Mailbox *)ShmemInitStruct("pgbus_stream disconnect", disconnect_size(), &found);
  if (!found) {
    memset(g_box, 0, sizeof(Mailbox));
    SpinLockInit(&g_box->mutex);
    for (int i = 0; i < kDisconnectSlots; i++)
      pg_atomic_init_u64(&g_box->slots[i].ended, 0);
    for (int w = 0; w < kMaxWorkers; w++)
      pg_atomic_init_u64(&g_box->done[w], 0);
  }
}

int64 disconnect_post(uint64 conn_id, const char *sub, int timeout_ms, bool *late) {
  const TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
  uint64 seq = 0;
  while (seq == 0) {
    SpinLockAcquire(&g_box->mutex);
    const uint64 posted = g_box->posted;
    // A slot is reused only once every running worker handled what it held.
    if (posted + 1 - oldest_unhandled(posted) < (uint64)kDisconnectSlots) {
      seq = ++g_box->posted;
      Slot *sl = &g_box->slots[seq % kDisconnectSlots];
      sl->seq = seq;
      sl->conn_id = conn_id;
      strlcpy(sl->sub, sub ? sub : "", sizeof(sl->sub));
      pg_atomic_write_u64(&sl->ended, 0);
    }
    SpinLockRelease(&g_box->mutex);
    if (seq != 0)
      break;
    if (GetCurrentTimestamp() >= deadline)
      ereport(ERROR, (errcode(ERRCODE_LOCK_NOT_AVAILABLE),
                      errmsg("pgbus_stream: the workers did not take the disconnect request"),
                      errhint("Too many disconnect() calls wait for the workers; retry.")));
    wake_all_workers();
    nap();
  }
  wake_all_workers();
  *late = false;
  while (oldest_unhandled(seq) <= seq) {
    if (GetCurrentTimestamp() >= deadline) {
      *late = true;
      break;
    }
    nap();
  }
  return (int64)pg_atomic_read_u64(&g_box->slots[seq % kDisconnectSlots].ended);
}

void disconnect_worker_start(int w) {
  SpinLockAcquire(&g_box->mutex);
  const uint64 posted = g_box->posted;
  SpinLockRelease(&g_box->mutex);
  pg_atomic_write_u64(&g_box->done[w], posted);
}

int disconnect_pending(int w, DisconnectWanted *out) {
  const uint64 done = pg_atomic_read_u64(&g_box->done[w]);
  int n = 0;
  SpinLockAcquire(&g_box->mutex);
  for (uint64 seq = done + 1; seq <= g_box->posted && n < kDisconnectSlots; seq++) {
    const Slot *sl = &g_box->slots[seq % kDisconnectSlots];
    if (sl->seq != seq)
      break; // cannot happen: posters wait for every running worker
    out[n].seq = seq;
    out[n].conn_id = sl->conn_id;
    memcpy(out[n].sub, sl->sub, sizeof(out[n].sub));
    n++;
  }
  SpinLockRelease(&g_box->mutex);
  return n;
}

void disconnect_done(int w, uint64 seq, int64 ended) {
  if (ended > 0)
    pg_atomic_fetch_add_u64(&g_box->slots[seq % kDisconnectSlots].ended, (uint64)ended);
  pg_atomic_write_u64(&g_box->done[w], seq); // a full barrier after the count
}

} // namespace pgbs::shmem
