// The awaited-stream set and the births counter (see awaited.hpp).
#include "shmem/awaited.hpp"
#define PGBS_SHMEM_LAYOUT // src/shmem: the layout is ours
#include "shmem/layout.hpp"

// clang-format off: miscadmin.h must come first here
extern "C" {
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
}
// clang-format on

namespace pgbs::shmem {
namespace {

constexpr int kNameMax = 128; // cursor::kMaxStreamName

struct Awaited {
  Oid dboid;
  uint32 workers; // bit w: worker w has a subscription waiting (0: free)
  char name[kNameMax + 1];
};

struct AwaitedSet {
  LWLock *lock;
  pg_atomic_uint64 births;
  pg_atomic_uint64 catalog_reads[kMaxWorkers];
  pg_atomic_uint64 pending[kMaxWorkers];
  int capacity;
  Awaited items[FLEXIBLE_ARRAY_MEMBER];
};

AwaitedSet *g_set = nullptr;
int g_capacity = 0; // taken once in the postmaster, as for every size of shared memory

int capacity() { return g_capacity; }

Awaited *find(Oid dboid, const char *name) {
  for (int i = 0; i < g_set->capacity; i++) {
    Awaited *a = &g_set->items[i];
    if (a->workers != 0 && a->dboid == dboid && strcmp(a->name, name) == 0)
      return a;
  }
  return nullptr;
}

} // namespace

Size awaited_size() {
  return add_size(offsetof(AwaitedSet, items), mul_size(capacity(), sizeof(Awaited)));
}

void awaited_request(int capacity) {
  g_capacity = capacity;
  RequestAddinShmemSpace(awaited_size());
  RequestNamedLWLockTranche("pgbus_stream_awaited", 1);
}

void awaited_startup() {
  bool found;
  g_set = (AwaitedSet *)ShmemInitStruct("pgbus_stream awaited", awaited_size(), &found);
  if (!found) {
    memset(g_set, 0, awaited_size());
    g_set->lock = &GetNamedLWLockTranche("pgbus_stream_awaited")[0].lock;
    pg_atomic_init_u64(&g_set->births, 0);
    for (int w = 0; w < kMaxWorkers; w++) {
      pg_atomic_init_u64(&g_set->catalog_reads[w], 0);
      pg_atomic_init_u64(&g_set->pending[w], 0);
    }
    g_set->capacity = capacity();
  }
}

bool await_stream(Oid dboid, const char *name, int w, bool on) {
  if (strlen(name) > (size_t)kNameMax)
    return false;
  bool ok = true;
  LWLockAcquire(g_set->lock, LW_EXCLUSIVE);
  Awaited *a = find(dboid, name);
  if (on) {
    if (a == nullptr)
      for (int i = 0; i < g_set->capacity && a == nullptr; i++)
        if (g_set->items[i].workers == 0) {
          a = &g_set->items[i];
          a->dboid = dboid;
          strlcpy(a->name, name, sizeof(a->name));
        }
    if (a)
      a->workers |= 1u << w;
    ok = a != nullptr;
  } else if (a) {
    a->workers &= ~(1u << w);
  }
  LWLockRelease(g_set->lock);
  return ok;
}

bool stream_awaited(Oid dboid, const char *name) {
  LWLockAcquire(g_set->lock, LW_SHARED);
  const bool found = find(dboid, name) != nullptr;
  LWLockRelease(g_set->lock);
  return found;
}

void clear_awaited(int w) {
  LWLockAcquire(g_set->lock, LW_EXCLUSIVE);
  for (int i = 0; i < g_set->capacity; i++)
    g_set->items[i].workers &= ~(1u << w);
  LWLockRelease(g_set->lock);
}

uint64 stream_births() { return pg_atomic_read_u64(&g_set->births); }

// Every worker looks: which one awaits the stream is not known here, and
// births are rare next to sends.
void note_births() {
  pg_atomic_fetch_add_u64(&g_set->births, 1);
  Shared *s = shared();
  for (int i = 0; i < kMaxWorkers; i++)
    if (Latch *l = s->worker_latch[i])
      SetLatch(l);
}

void publish_lookup_figures(int w, uint64 catalog_reads, uint64 pending) {
  pg_atomic_write_u64(&g_set->catalog_reads[w], catalog_reads);
  pg_atomic_write_u64(&g_set->pending[w], pending);
}

void lookup_figures(int w, uint64 *catalog_reads, uint64 *pending) {
  *catalog_reads = pg_atomic_read_u64(&g_set->catalog_reads[w]);
  *pending = pg_atomic_read_u64(&g_set->pending[w]);
}

} // namespace pgbs::shmem
