// The capture's WAL messages, how they are applied, and the redo of 0.2.0's
// records (see wal.hpp). Plain structs and PostgreSQL's C API only, like
// capture.cpp: nothing here throws, and the commit-time and apply paths
// neither allocate nor raise an error.
#include "capture/wal.hpp"
#include "settings/settings.hpp"
#include "shmem/ring.hpp"
#include "shmem/shared.hpp"
#include "shmem/standby.hpp"

extern "C" {
#include "postgres.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "replication/message.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/memutils.h"
}
#include "pg/compat.hpp"

namespace pgbs::wal {
namespace {

// 0.2.0's record types (info bits of its resource manager).
constexpr uint8 kInfoFloor = 0x10;
constexpr uint8 kInfoCommit = 0x20;
constexpr uint8 kInfoForget = 0x30;

// A message body starts with its kind and the format's version; the structs
// below follow, as 0.2.0's records carried them.
constexpr uint8 kMsgFloor = 'F';
constexpr uint8 kMsgCommit = 'C';
constexpr uint8 kMsgForget = 'X';
constexpr uint8 kMsgVersion = 1;
struct MsgHdr {
  uint8 kind;
  uint8 version;
  uint8 pad[6];
};

// One message with this extension's prefix (the version difference of
// LogLogicalMessage lives in pg/compat.hpp); the commit's nudge below flushes.
inline XLogRecPtr log_message(const char *body, size_t len, bool transactional) {
  return pg::log_logical_message(kPrefix, body, len, transactional);
}

// COMMIT flags.
constexpr uint32 kCatalogChanged = 1;
constexpr uint32 kIncomplete = 2; // events the record does not carry: readers catch up

// Ring records one COMMIT record carries at most; beyond it the standby reads
// the transaction's rows from its tables (ephemeral events count as lost).
constexpr size_t kMaxRecordBytes = 4 * 1024 * 1024;

struct FloorRec {
  TransactionId xid; // the top-level transaction
  Oid dboid;
  int64 stream_id;
  int64 floor;
};

struct ForgetRec {
  Oid dboid;
  uint32 pad;
  int64 stream_id;
};

struct CommitHdr {
  TransactionId xid;
  Oid dboid;
  uint32 flags;
  uint32 nstreams;
  uint64 ring_bytes;
};

struct StreamRec {
  int64 stream_id;
  int64 max_id;
  int64 count;
  int64 lost_ephemeral; // ephemeral events that did not fit the primary's ring
};

// The COMMIT message being built: reserved at PRE_COMMIT, filled at COMMIT.
// One buffer laid out as the message (MsgHdr, CommitHdr, the StreamRecs,
// then the ring records), since a logical message is one piece of data.
struct Pending {
  bool reserved;
  TransactionId xid;
  CommitHdr hdr;
  char *msg; // TopMemoryContext, cap bytes
  size_t cap;
  int want_streams;  // StreamRec places reserved for this transaction
  size_t want_bytes; // record bytes reserved for this transaction
  int last_stream;   // add_record's lookup hint
};
Pending pending;

constexpr size_t kFixedBytes = sizeof(MsgHdr) + sizeof(CommitHdr);

StreamRec *streams() { return (StreamRec *)(pending.msg + kFixedBytes); }
char *records() { return pending.msg + kFixedBytes + pending.want_streams * sizeof(StreamRec); }

StreamRec *stream_rec(int64 stream_id) {
  StreamRec *sr = streams();
  if (pending.last_stream < (int)pending.hdr.nstreams &&
      sr[pending.last_stream].stream_id == stream_id)
    return &sr[pending.last_stream];
  for (uint32 i = 0; i < pending.hdr.nstreams; i++)
    if (sr[i].stream_id == stream_id) {
      pending.last_stream = (int)i;
      return &sr[i];
    }
  return nullptr;
}

// ---- applying (a standby's worker 0; 0.2.0's records: the startup process) --

bool apply_floor(const char *data, size_t len) {
  FloorRec r;
  if (len != sizeof(r))
    return false;
  memcpy(&r, data, sizeof(r));
  shmem::standby_add_floor(r.xid, r.dboid, r.stream_id, r.floor);
  return true;
}

constexpr int kMaxApplyStreams = 1024;

bool apply_commit(const char *data, size_t len, bool to_ring) {
  CommitHdr h;
  if (len < sizeof(h))
    return false;
  memcpy(&h, data, sizeof(h));
  const size_t streams_len = (size_t)h.nstreams * sizeof(StreamRec);
  if (h.nstreams > kMaxApplyStreams || sizeof(h) + streams_len + h.ring_bytes != len)
    return false;
  const char *srecs = data + sizeof(h);
  const char *recs = srecs + streams_len;
  shmem::StreamEntry *entries[kMaxApplyStreams];
  StreamRec sr[1];
  bool incomplete = (h.flags & kIncomplete) != 0;
  for (uint32 i = 0; i < h.nstreams; i++) {
    memcpy(sr, srecs + i * sizeof(StreamRec), sizeof(StreamRec));
    entries[i] = shmem::acquire_stream(h.dboid, sr->stream_id, shmem::kBackend);
    if (entries[i] == nullptr)
      incomplete = true; // shared memory is full: the tables are the truth
  }
  auto entry_of = [&](int64 stream_id) -> shmem::StreamEntry * {
    for (uint32 i = 0; i < h.nstreams; i++)
      if (entries[i] && shmem::stream_id_of(entries[i]) == stream_id)
        return entries[i];
    return nullptr;
  };
  // This node's ring may be smaller than the primary's: what does not fit in
  // half of it is left to the tables, as on the primary.
  const bool fits = to_ring && h.ring_bytes <= shmem::ring_capacity() / 2;
  if (!fits && to_ring)
    incomplete = true;
  if (h.ring_bytes > 0) {
    shmem::RingAppend append = shmem::ring_append_begin();
    for (size_t o = 0; o < h.ring_bytes;) {
      ring::Header rh;
      if (h.ring_bytes - o < sizeof(rh)) {
        incomplete = true;
        break;
      }
      memcpy(&rh, recs + o, sizeof(rh));
      const uint64 plen = (uint64)rh.data_len + rh.event_len + rh.visible_len;
      if (rh.len < sizeof(rh) || rh.len % 8 != 0 || rh.len > h.ring_bytes - o ||
          sizeof(rh) + plen > rh.len) {
        incomplete = true;
        break;
      }
      // Ephemeral events are numbered by this node's entries, in ring order.
      if (rh.kind == ring::Kind::Inline) {
        shmem::StreamEntry *e = entry_of(rh.stream_id);
        rh.ephemeral_seq = e ? shmem::next_ephemeral_seq(e) : 0;
      }
      if (fits)
        append.put(rh, recs + o + sizeof(rh));
      o += rh.len;
    }
    shmem::ring_append_end(append);
  }
  for (uint32 i = 0; i < h.nstreams; i++) {
    if (entries[i] == nullptr)
      continue;
    memcpy(sr, srecs + i * sizeof(StreamRec), sizeof(StreamRec));
    if (sr->lost_ephemeral > 0)
      shmem::skip_ephemeral_seq(entries[i], (uint64)sr->lost_ephemeral);
    if (sr->max_id > 0)
      shmem::advance_max_committed(entries[i], sr->max_id);
    shmem::count_events(entries[i], (uint64)sr->count);
  }
  if (incomplete)
    shmem::ring_overflow();
  if (TransactionIdIsValid(h.xid))
    shmem::standby_clear(h.xid);
  if (h.flags & kCatalogChanged)
    shmem::catalog_changed();
  shmem::wake_all_workers();
  for (uint32 i = 0; i < h.nstreams; i++)
    shmem::release_stream(entries[i], shmem::kBackend);
  return true;
}

bool apply_forget(const char *data, size_t len) {
  ForgetRec r;
  if (len != sizeof(r))
    return false;
  memcpy(&r, data, sizeof(r));
  shmem::forget_stream(r.dboid, r.stream_id);
  return true;
}

// ---- 0.2.0's resource manager: redo only ------------------------------------

void rm_redo(XLogReaderState *record) {
  const uint8 info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
  const char *data = XLogRecGetData(record);
  const uint32 len = XLogRecGetDataLen(record);
  bool ok = false;
  if (info == kInfoFloor)
    ok = apply_floor(data, len);
  else if (info == kInfoCommit)
    ok = apply_commit(data, len, true);
  else if (info == kInfoForget)
    ok = apply_forget(data, len);
  if (!ok)
    elog(PANIC, "pgbus_stream: malformed WAL record (type %u, %u bytes)", info, len);
}

void rm_desc(StringInfo buf, XLogReaderState *record) {
  const uint8 info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
  const char *data = XLogRecGetData(record);
  const uint32 len = XLogRecGetDataLen(record);
  if (info == kInfoFloor && len == sizeof(FloorRec)) {
    FloorRec r;
    memcpy(&r, data, sizeof(r));
    appendStringInfo(buf, "xid %u db %u stream " INT64_FORMAT " floor " INT64_FORMAT, r.xid,
                     r.dboid, r.stream_id, r.floor);
  } else if (info == kInfoForget && len == sizeof(ForgetRec)) {
    ForgetRec r;
    memcpy(&r, data, sizeof(r));
    appendStringInfo(buf, "db %u stream " INT64_FORMAT, r.dboid, r.stream_id);
  } else if (info == kInfoCommit && len >= sizeof(CommitHdr)) {
    CommitHdr h;
    memcpy(&h, data, sizeof(h));
    appendStringInfo(buf, "xid %u db %u streams %u record bytes %llu flags %u", h.xid, h.dboid,
                     h.nstreams, (unsigned long long)h.ring_bytes, h.flags);
  }
}

const char *rm_identify(uint8 info) {
  switch (info & ~XLR_INFO_MASK) {
  case kInfoFloor:
    return "FLOOR";
  case kInfoCommit:
    return "COMMIT";
  case kInfoForget:
    return "FORGET";
  default:
    return nullptr;
  }
}

RmgrData rmgr = {
    "pgbus_stream", rm_redo, rm_desc, rm_identify, nullptr, nullptr, nullptr, nullptr,
};

// A small message (FLOOR, FORGET): the header and the struct in one piece.
template <typename T> void log_small(uint8 kind, const T &rec) {
  char body[sizeof(MsgHdr) + sizeof(T)];
  MsgHdr m;
  memset(&m, 0, sizeof(m));
  m.kind = kind;
  m.version = kMsgVersion;
  memcpy(body, &m, sizeof(m));
  memcpy(body + sizeof(m), &rec, sizeof(rec));
  // Transactional: a logical decoding consumer sees it only with the
  // transaction's own changes (the standby's reader reads it either way).
  (void)log_message(body, sizeof(body), true);
}

} // namespace

void register_rmgr() { RegisterCustomRmgr(kRmgrId, &rmgr); }

bool enabled() { return XLogIsNeeded() && settings::standby_records(); }

bool apply_message(const char *body, size_t len, bool to_ring) {
  MsgHdr m;
  if (len < sizeof(m))
    return false;
  memcpy(&m, body, sizeof(m));
  if (m.version != kMsgVersion)
    return false;
  body += sizeof(m);
  len -= sizeof(m);
  switch (m.kind) {
  case kMsgFloor:
    return apply_floor(body, len);
  case kMsgCommit:
    return apply_commit(body, len, to_ring);
  case kMsgForget:
    return apply_forget(body, len);
  default:
    return false;
  }
}

void log_floor(int64_t stream_id, int64_t floor) {
  if (!enabled())
    return;
  // The message names the current (sub)transaction's xid, so a standby knows
  // the transaction is in progress from this message on; the floor is keyed
  // by the top-level xid, which the COMMIT message names.
  (void)GetCurrentTransactionId();
  FloorRec r;
  memset(&r, 0, sizeof(r));
  r.xid = GetTopTransactionId();
  r.dboid = MyDatabaseId;
  r.stream_id = stream_id;
  r.floor = floor;
  log_small(kMsgFloor, r);
}

void log_forget(int64_t stream_id) {
  if (!enabled())
    return;
  ForgetRec r;
  memset(&r, 0, sizeof(r));
  r.dboid = MyDatabaseId;
  r.stream_id = stream_id;
  log_small(kMsgForget, r);
}

void reserve(int nstreams, size_t ring_bytes) {
  pending.reserved = false;
  if (!enabled())
    return;
  if (ring_bytes > kMaxRecordBytes)
    ring_bytes = 0; // too large for one message: it says incomplete
  const size_t need = kFixedBytes + (size_t)nstreams * sizeof(StreamRec) + ring_bytes;
  if (need > pending.cap) {
    char *n = (char *)MemoryContextAlloc(TopMemoryContext, need);
    if (pending.msg)
      pfree(pending.msg);
    pending.msg = n;
    pending.cap = need;
  }
  pending.want_streams = nstreams;
  pending.want_bytes = ring_bytes;
  pending.xid = GetTopTransactionIdIfAny();
  pending.reserved = true;
}

void begin_commit(uint32_t dboid, bool catalog_changed, bool incomplete) {
  if (!pending.reserved)
    return;
  memset(&pending.hdr, 0, sizeof(pending.hdr));
  pending.hdr.xid = pending.xid;
  pending.hdr.dboid = dboid;
  pending.hdr.flags = (catalog_changed ? kCatalogChanged : 0) | (incomplete ? kIncomplete : 0);
  pending.last_stream = 0;
}

void add_stream(int64_t stream_id, int64_t max_id, int64_t count) {
  if (!pending.reserved)
    return;
  if ((int)pending.hdr.nstreams >= pending.want_streams) {
    pending.hdr.flags |= kIncomplete;
    return;
  }
  StreamRec *r = &streams()[pending.hdr.nstreams++];
  r->stream_id = stream_id;
  r->max_id = max_id;
  r->count = count;
  r->lost_ephemeral = 0;
}

void add_record(const ring::Header &h, const char *payload, bool written) {
  if (!pending.reserved)
    return;
  if (!written || pending.hdr.ring_bytes + h.len > pending.want_bytes) {
    if (h.kind == ring::Kind::Inline)
      if (StreamRec *r = stream_rec(h.stream_id))
        r->lost_ephemeral++;
    pending.hdr.flags |= kIncomplete;
    return;
  }
  // A linear buffer is a ring that never wraps.
  ring::write_record(records(), pending.want_bytes, pending.hdr.ring_bytes, h, payload);
  pending.hdr.ring_bytes += h.len;
}

void finish_commit() {
  if (!pending.reserved)
    return;
  pending.reserved = false;
  MsgHdr m;
  memset(&m, 0, sizeof(m));
  m.kind = kMsgCommit;
  m.version = kMsgVersion;
  memcpy(pending.msg, &m, sizeof(m));
  memcpy(pending.msg + sizeof(m), &pending.hdr, sizeof(pending.hdr));
  // StreamRec places left unused (none in practice): the records close up.
  const size_t streams_len = pending.hdr.nstreams * sizeof(StreamRec);
  char *recs_at = pending.msg + kFixedBytes + streams_len;
  if (recs_at != records() && pending.hdr.ring_bytes > 0)
    memmove(recs_at, records(), pending.hdr.ring_bytes);
  // Cannot fail here: insertion is allowed (not in recovery), no insertion is
  // open, the message is three data chunks and bounded by kMaxRecordBytes;
  // a WAL write failure is a PANIC anyway. Not transactional: the
  // transaction has committed.
  const XLogRecPtr end =
      log_message(pending.msg, kFixedBytes + streams_len + pending.hdr.ring_bytes, false);
  // The commit record was flushed (or left to the WAL writer) before this
  // one was written: without a nudge this record would wait for the next
  // commit or the WAL writer's next round before a standby sees it.
  XLogSetAsyncXactLSN(end);
  if (synchronous_commit > SYNCHRONOUS_COMMIT_OFF)
    pg::wake_wal_writer();
}

void reset() {
  pending.reserved = false;
  if (pending.cap > 1024 * 1024) { // do not keep a large buffer between transactions
    pfree(pending.msg);
    pending.msg = nullptr;
    pending.cap = 0;
  }
}

} // namespace pgbs::wal
