// The capture's WAL messages, for nodes that replay this WAL (hot standbys)
// (docs/ARCHITECTURE.md, "Standbys"). They are logical messages (prefix
// kPrefix) of PostgreSQL's own resource manager, which every server replays
// as a no-op: a server without the library replays them and goes on. A hot
// standby's worker reads them back from its replayed WAL (worker/wal_reader).
//   FLOOR   written by the BEFORE hook when a transaction first writes a
//           stream, after its xid is assigned and before it draws any id:
//           the standby's copy of the producer's in-flight floor.
//   COMMIT  written at XACT_EVENT_COMMIT, after the commit record: the
//           transaction's ring records and committed maxima, applied to the
//           node's own ring exactly as a local commit would be.
//   FORGET  a stream id new in the catalog: its shared entry starts afresh,
//           as on the primary (shmem::forget_stream).
// Written only when wal_level is replica or higher and
// pgbus_stream.standby_records is on.
//
// Version 0.2.0 wrote the same three records with a custom resource manager
// (id 128); it stays registered so that WAL written by 0.2.0 still replays,
// and nothing writes it any more.
#pragma once

#include "shmem/ring_record.hpp"

#include <cstddef>
#include <cstdint>

namespace pgbs::wal {

// The logical-message prefix of every message written here.
constexpr const char *kPrefix = "pgbus_stream";

// The resource manager id of 0.2.0's records (RM_EXPERIMENTAL_ID): replayed,
// never written.
constexpr int kRmgrId = 128;

void register_rmgr(); // from _PG_init

// True when messages are written (wal_level >= replica and
// pgbus_stream.standby_records).
bool enabled();

// BEFORE trigger: assigns the xid and logs stream_id's floor. May ERROR (an
// ordinary trigger error).
void log_floor(int64_t stream_id, int64_t floor);

// A stream id new in the catalog (may ERROR).
void log_forget(int64_t stream_id);

// XACT_EVENT_PRE_COMMIT (may ERROR): reserves the memory the COMMIT message
// needs for nstreams streams and ring_bytes of records, so that nothing at
// XACT_EVENT_COMMIT allocates. Records beyond what was reserved are left out
// and the message says so (the standby then catches up from the tables).
void reserve(int nstreams, size_t ring_bytes);

// XACT_EVENT_COMMIT: nothing below can fail or allocate.
void begin_commit(uint32_t dboid, bool catalog_changed, bool incomplete);
// One record as the ring holds it; written = false for an ephemeral event
// that did not fit the primary's ring (counted as lost on the standby).
void add_record(const ring::Header &h, const char *payload, bool written);
void add_stream(int64_t stream_id, int64_t max_id, int64_t count);
// Inserts the message and asks the WAL writer to send it on promptly.
void finish_commit();
// The transaction ended without commit: forget what was reserved.
void reset();

// Reader side (a hot standby's worker 0): applies one message body (what
// follows the prefix) to this node's shared memory, as a local commit or
// floor would; with to_ring false a COMMIT raises the maxima and clears the
// floors but copies nothing into the ring. Nothing here raises an error or
// allocates; false for a body it cannot read (the caller counts it as an
// overrun).
bool apply_message(const char *body, size_t len, bool to_ring);

} // namespace pgbs::wal
