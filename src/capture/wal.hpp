// The capture's WAL records, for nodes that replay this WAL (hot standbys,
// and crash recovery): a custom resource manager with two records
// (docs/ARCHITECTURE.md, "Standbys").
//   FLOOR   written by the BEFORE trigger when a transaction first writes a
//           stream, after its xid is assigned and before it draws any id:
//           the standby's copy of the producer's in-flight floor.
//   COMMIT  written at XACT_EVENT_COMMIT, after the commit record: the
//           transaction's ring records and committed maxima. Redo copies
//           them into the node's own ring, exactly as a local commit would.
//   FORGET  a stream id new in the catalog: its shared entry starts afresh,
//           as on the primary (shmem::forget_stream).
// Written only when wal_level is replica or higher and
// pgbus_stream.standby_records is on.
#pragma once

#include "shmem/ring_record.hpp"

#include <cstddef>
#include <cstdint>

namespace pgbs::wal {

// The resource manager id (RM_EXPERIMENTAL_ID): every node that replays this
// WAL must preload the extension, or its recovery stops at the first record.
constexpr int kRmgrId = 128;

void register_rmgr(); // from _PG_init

// True when records are written (wal_level >= replica and
// pgbus_stream.standby_records).
bool enabled();

// BEFORE trigger: assigns the xid and logs stream_id's floor. May ERROR (an
// ordinary trigger error).
void log_floor(int64_t stream_id, int64_t floor);

// A stream id new in the catalog (may ERROR).
void log_forget(int64_t stream_id);

// XACT_EVENT_PRE_COMMIT (may ERROR): reserves the memory the COMMIT record
// needs for nstreams streams and ring_bytes of records, so that nothing at
// XACT_EVENT_COMMIT allocates. Records beyond what was reserved are left out
// and the record says so (the standby then catches up from the tables).
void reserve(int nstreams, size_t ring_bytes);

// XACT_EVENT_COMMIT: nothing below can fail or allocate.
void begin_commit(uint32_t dboid, bool catalog_changed, bool incomplete);
// One record as the ring holds it; written = false for an ephemeral event
// that did not fit the primary's ring (counted as lost on the standby).
void add_record(const ring::Header &h, const char *payload, bool written);
void add_stream(int64_t stream_id, int64_t max_id, int64_t count);
// Inserts the record and asks the WAL writer to send it on promptly.
void finish_commit();
// The transaction ended without commit: forget what was reserved.
void reset();

} // namespace pgbs::wal
