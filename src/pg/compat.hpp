// The PostgreSQL APIs that differ between the supported majors (15, 17, 18),
// behind one name each; every version test of the extension is in this file
// (docs/ARCHITECTURE.md, "Supported PostgreSQL versions"). The boundaries are
// those of the releases that changed each API, so 16 takes the branches it
// shares with its neighbours, but it is not built or tested here.
//
// Include after postgres.h (it is included here too) and, from C++, outside
// any extern "C" block: the PostgreSQL headers are wrapped here.
#pragma once

extern "C" {
#include "postgres.h"
#include "catalog/pg_extension.h"
#include "miscadmin.h"
#include "replication/message.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/memutils.h"
#if PG_VERSION_NUM >= 160000
// VARDATA_ANY, VARSIZE_ANY_EXHDR: split off postgres.h in 16; 18's headers
// no longer bring them in by the way.
#include "varatt.h"
#endif
}

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 190000
#error "pgbus_stream builds against PostgreSQL 15 to 18 (tested: 15, 17, 18)"
#endif

namespace pgbs::pg {

// Writes a logical message (replayed as a no-op by every server). 17 added
// the `flush` argument; none of these messages asks for a flush of its own.
inline XLogRecPtr log_logical_message(const char *prefix, const char *body, size_t len,
                                      bool transactional) {
#if PG_VERSION_NUM >= 170000
  return LogLogicalMessage(prefix, body, len, transactional, false);
#else
  return LogLogicalMessage(prefix, body, len, transactional);
#endif
}

// This backend's index in the PGPROC array (ProcGlobal->allProcs), which the
// shared per-backend slots are indexed by: PGPROC.pgprocno up to 16, the
// global MyProcNumber from 17 (a ProcNumber, same value).
inline int my_proc_number() {
#if PG_VERSION_NUM >= 170000
  return MyProcNumber;
#else
  return MyProc->pgprocno;
#endif
}

// The local id of this backend's current top-level transaction: PGPROC.lxid
// up to 16, PGPROC.vxid.lxid from 17.
inline LocalTransactionId my_local_xid() {
#if PG_VERSION_NUM >= 170000
  return MyProc->vxid.lxid;
#else
  return MyProc->lxid;
#endif
}

// Sets the WAL writer's latch, if it runs. Up to 17 PROC_HDR holds a pointer
// to that latch; from 18 the WAL writer's ProcNumber, whose PGPROC holds it.
inline void wake_wal_writer() {
#if PG_VERSION_NUM >= 180000
  const ProcNumber walwriter = ((volatile PROC_HDR *)ProcGlobal)->walwriterProc;
  if (walwriter != INVALID_PROC_NUMBER)
    SetLatch(&GetPGProcByNumber(walwriter)->procLatch);
#else
  Latch *latch = ProcGlobal->walwriterLatch;
  if (latch != nullptr)
    SetLatch(latch);
#endif
}

// A wait event set that lives as long as the process. Up to 16 it is
// allocated in a memory context (TopMemoryContext); from 17 it is tracked by
// a resource owner instead, and none (nullptr) means it is allocated in
// TopMemoryContext and never released by an abort.
inline WaitEventSet *create_session_wait_event_set(int nevents) {
#if PG_VERSION_NUM >= 170000
  return CreateWaitEventSet(nullptr, nevents);
#else
  return CreateWaitEventSet(TopMemoryContext, nevents);
#endif
}

// Whether role owns extension ext: pg_extension_ownercheck() up to 15,
// object_ownercheck() on pg_extension from 16 (the per-catalog functions
// were folded into it).
inline bool owns_extension(Oid ext, Oid role) {
#if PG_VERSION_NUM >= 160000
  return object_ownercheck(ExtensionRelationId, ext, role);
#else
  return pg_extension_ownercheck(ext, role);
#endif
}

} // namespace pgbs::pg
