// The WAL reader of a hot standby's worker 0 (see wal_reader.hpp).
#include "worker/wal_reader.hpp"
#include "capture/wal.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "shmem/ring.hpp"
#include "shmem/standby.hpp"

extern "C" {
#include "postgres.h"
#include "access/rmgr.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "access/xlogutils.h"
#include "replication/message.h"
#include "replication/walreceiver.h"
#include "storage/latch.h"
#include "utils/memutils.h"
}

#ifdef __linux__
#include <sys/inotify.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace pgbs::worker {
namespace {

// WAL read per turn at most: a long catch-up leaves the loop its turns.
constexpr uint64 kTurnBytes = 16 * 1024 * 1024;
// Nothing in the startup process wakes this worker: that would need a hook
// in redo, which a node without the library does not have, and the records
// must replay there. What wakes it is WAL arriving: a write into pg_wal (the
// WAL receiver's, or a restored segment) seen through inotify. From then on
// it looks at the replay position every kBusyMs while replay moves, the WAL
// receiver holds WAL not replayed yet, or within kBusyWindowUs of the last
// write; then it sleeps until the next write. Without inotify it polls,
// backing off to kIdleMs while nothing moves.
constexpr long kBusyMs = 1;
constexpr long kIdleMs = 16;
constexpr int64 kBusyWindowUs = 50000;

// LSN_FORMAT_ARGS's type check does not compile as C++.
#define LSN_PARTS(lsn) (uint32)((lsn) >> 32), (uint32)(lsn)

struct Reader {
  bool active = false;
  MemoryContext cxt = nullptr;
  XLogReaderState *xr = nullptr;
  ReadLocalXLogPageNoWaitPrivate page{};
  XLogRecPtr next = InvalidXLogRecPtr; // where the next record starts (or a redo point)
  bool find = false;                   // `next` may not be a record start
  bool positioned = false;             // XLogBeginRead done since the last stop
  XLogRecPtr last_replay = InvalidXLogRecPtr;
  long interval = kBusyMs;
  uint64 malformed = 0; // messages that could not be read (warned once per turn)
  int notify_fd = -1;   // inotify on pg_wal, or -1 (then the reader polls)
  int notify_wd = -1;
  int64 busy_until_us = 0;
};
Reader rd;

void set_phase(shmem::ReaderPhase phase) {
  shmem::set_standby_reader_phase(phase);
  shmem::wake_all_workers(); // horizons may move
}

void allocate() {
  if (rd.cxt == nullptr)
    pg::call([] {
      rd.cxt = AllocSetContextCreate(TopMemoryContext, "pgbus_stream wal reader",
                                     ALLOCSET_DEFAULT_SIZES);
    });
  pg::call([] {
    MemoryContext old = MemoryContextSwitchTo(rd.cxt);
    XLogReaderRoutine routine;
    memset(&routine, 0, sizeof(routine));
    routine.page_read = read_local_xlog_page_no_wait;
    routine.segment_open = wal_segment_open;
    routine.segment_close = wal_segment_close;
    rd.xr = XLogReaderAllocate(wal_segment_size, nullptr, &routine, &rd.page);
    MemoryContextSwitchTo(old);
    if (rd.xr == nullptr)
      ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory"),
                      errdetail("Failed while allocating a WAL reading processor.")));
  });
  rd.positioned = false;
}

void release() {
  if (rd.xr != nullptr) {
    XLogReaderState *xr = rd.xr;
    rd.xr = nullptr;
    try {
      pg::call([xr] { XLogReaderFree(xr); });
    } catch (const pg::Error &) {
    }
  }
  if (rd.cxt != nullptr)
    MemoryContextReset(rd.cxt);
}

// One of ours: apply it. Runs inside pg::call (plain C only).
void apply(XLogReaderState *xr, bool to_ring) {
  const size_t len = XLogRecGetDataLen(xr);
  if (len < SizeOfLogicalMessage)
    return;
  const xl_logical_message *m = (const xl_logical_message *)XLogRecGetData(xr);
  const size_t plen = strlen(wal::kPrefix) + 1;
  if (m->prefix_size != plen || len < SizeOfLogicalMessage + plen ||
      memcmp(m->message, wal::kPrefix, plen) != 0)
    return; // another prefix: not ours
  if (m->message_size > len - SizeOfLogicalMessage - plen ||
      !wal::apply_message(m->message + plen, m->message_size, to_ring)) {
    rd.malformed++;
    shmem::ring_incomplete(); // the tables are the truth
  }
}

// Watches pg_wal (the backend's working directory is the data directory).
void watch_wal_dir() {
#ifdef __linux__
  rd.notify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (rd.notify_fd < 0)
    return;
  rd.notify_wd = inotify_add_watch(rd.notify_fd, XLOGDIR, IN_MODIFY | IN_CREATE | IN_MOVED_TO);
  if (rd.notify_wd < 0) {
    close(rd.notify_fd);
    rd.notify_fd = -1;
  }
#endif
}

// True when WAL was written since the last call (the events are consumed).
bool wal_written() {
  bool any = false;
#ifdef __linux__
  if (rd.notify_fd < 0)
    return false;
  alignas(struct inotify_event) char buf[4096];
  while (read(rd.notify_fd, buf, sizeof(buf)) > 0)
    any = true;
#endif
  return any;
}

// Once nothing is left to read the fd stays in the worker's wait set (it
// cannot be taken out there): only the watch goes.
void unwatch_wal_dir() {
#ifdef __linux__
  if (rd.notify_fd >= 0 && rd.notify_wd >= 0)
    inotify_rm_watch(rd.notify_fd, rd.notify_wd);
  rd.notify_wd = -1;
  (void)wal_written();
#endif
}

enum class Stop { EndOfWal, Budget, Done };

// Reads and applies records from rd.next, up to what was replayed (and
// before stop_at once recovery has ended). May ERROR (inside pg::call).
Stop read_records(XLogRecPtr stop_at, bool to_ring) {
  Stop why = Stop::Budget;
  pg::call([&] {
    MemoryContext old = MemoryContextSwitchTo(rd.cxt);
    XLogReaderState *xr = rd.xr;
    uint64 bytes = 0;
    if (!rd.positioned) {
      // A redo point, or a position at a page boundary (a record that ended
      // there): the first record at or after it.
      if (rd.find || !XRecOffIsValid(rd.next)) {
        rd.page.end_of_wal = false;
        const XLogRecPtr first = XLogFindNextRecord(xr, rd.next);
        if (XLogRecPtrIsInvalid(first)) {
          MemoryContextSwitchTo(old);
          if (!rd.page.end_of_wal)
            ereport(ERROR, (errmsg("no WAL record found after %X/%X", LSN_PARTS(rd.next))));
          why = Stop::EndOfWal;
          return;
        }
        rd.next = first;
        rd.find = false;
      }
      XLogBeginRead(xr, rd.next);
      rd.positioned = true;
    }
    for (;;) {
      if (!XLogRecPtrIsInvalid(stop_at) && rd.next >= stop_at) {
        why = Stop::Done;
        break;
      }
      if (bytes >= kTurnBytes) {
        why = Stop::Budget;
        break;
      }
      rd.page.end_of_wal = false;
      char *err = nullptr;
      XLogRecord *rec = XLogReadRecord(xr, &err);
      if (rec == nullptr) {
        rd.positioned = false; // begin again at rd.next next time
        if (rd.page.end_of_wal) {
          why = Stop::EndOfWal;
          break;
        }
        MemoryContextSwitchTo(old);
        ereport(ERROR, (errmsg("could not read WAL at %X/%X: %s", LSN_PARTS(rd.next),
                               err ? err : "unknown reason")));
      }
      if (!XLogRecPtrIsInvalid(stop_at) && xr->ReadRecPtr >= stop_at) {
        why = Stop::Done; // written by this node after its promotion
        break;
      }
      if (XLogRecGetRmid(xr) == RM_LOGICALMSG_ID &&
          (XLogRecGetInfo(xr) & ~XLR_INFO_MASK) == XLOG_LOGICAL_MESSAGE)
        apply(xr, to_ring);
      bytes += xr->EndRecPtr - xr->ReadRecPtr;
      rd.next = xr->EndRecPtr;
      shmem::set_standby_read_lsn(rd.next);
    }
    MemoryContextSwitchTo(old);
  });
  return why;
}

// After a failure: start afresh where replay stands. Floors written before
// it may have been missed, so every horizon is held until the transactions
// in progress now have ended, and the ring's events since are left to the
// tables.
void restart_at_replay(const std::string &why) {
  pg::warn("WAL reader: " + why + "; reading on from the replay position");
  release();
  XLogRecPtr replay = InvalidXLogRecPtr;
  TransactionId newest = InvalidTransactionId;
  pg::call([&] {
    replay = GetXLogReplayRecPtr(nullptr);
    newest = ReadNextTransactionId();
  });
  TransactionIdRetreat(newest);
  shmem::standby_hold_until(newest);
  shmem::ring_incomplete();
  rd.next = replay;
  rd.find = false;
  allocate();
  if (shmem::standby_reader_phase() == shmem::kReaderCatchingUp)
    set_phase(shmem::kReaderLive);
  else
    shmem::wake_all_workers();
}

} // namespace

void wal_reader_start() {
  const shmem::ReaderPhase phase = shmem::standby_reader_phase();
  const XLogRecPtr read_lsn = shmem::standby_read_lsn();
  const bool recovery = RecoveryInProgress();
  if (phase == shmem::kReaderDone || (!recovery && read_lsn == 0)) {
    // A primary (or a node promoted before this worker first ran): its own
    // commits reach the ring directly, what was replayed is in the tables.
    set_phase(shmem::kReaderDone);
    return;
  }
  try {
    if (read_lsn != 0) { // a previous process of this worker stopped there
      rd.next = read_lsn;
      rd.find = false;
    } else {
      // Where this node's replay started: the floors of transactions still
      // in progress were written after it (or before the checkpoint it
      // began from, as replay itself would have missed them).
      pg::call([] { rd.next = GetRedoRecPtr(); });
      rd.find = true;
    }
    allocate();
    watch_wal_dir();
    rd.active = true;
    rd.interval = kBusyMs;
    rd.busy_until_us = (int64)GetCurrentTimestamp() + kBusyWindowUs;
    char at[32];
    snprintf(at, sizeof(at), "%X/%X", LSN_PARTS(rd.next));
    pg::log(std::string("WAL reader: reading the capture's messages from ") + at);
  } catch (const pg::Error &e) {
    rd.active = false;
    pg::warn(std::string("WAL reader could not start: ") + e.what());
    set_phase(recovery ? shmem::kReaderLive : shmem::kReaderDone);
  }
}

int wal_reader_fd() { return rd.active ? rd.notify_fd : -1; }

long wal_reader_pump() {
  if (!rd.active)
    return -1;
  const int64 now_us = (int64)GetCurrentTimestamp();
  if (wal_written())
    rd.busy_until_us = now_us + kBusyWindowUs;
  try {
    bool recovery = true;
    XLogRecPtr replay = InvalidXLogRecPtr, received = InvalidXLogRecPtr;
    pg::call([&] {
      recovery = RecoveryInProgress();
      replay = GetXLogReplayRecPtr(nullptr);
      if (recovery)
        received = GetWalRcvFlushRecPtr(nullptr, nullptr);
    });
    // Once recovery has ended, the replay position stays at the end of the
    // last record replayed: what follows is this node's own.
    const XLogRecPtr stop_at = recovery ? InvalidXLogRecPtr : replay;
    const bool catching_up = shmem::standby_reader_phase() == shmem::kReaderCatchingUp;
    rd.malformed = 0;
    // While catching up the commits read are in the tables already (and
    // workers started after them): they raise the maxima and clear floors,
    // and the ring gets one overrun at the end instead of old events.
    const Stop why = read_records(stop_at, !catching_up);
    if (rd.malformed > 0)
      pg::warn("WAL reader: " + std::to_string((unsigned long long)rd.malformed) +
               " malformed message(s) skipped; readers catch up from the tables");
    if (why == Stop::Done || (why == Stop::EndOfWal && !recovery)) {
      release();
      unwatch_wal_dir();
      rd.active = false;
      set_phase(shmem::kReaderDone);
      pg::log("WAL reader: read every replayed message, this node writes its own");
      return -1;
    }
    if (why == Stop::Budget)
      return 0; // more to read: come back at once
    if (catching_up) {
      shmem::ring_incomplete();
      set_phase(shmem::kReaderLive);
    }
    const bool busy = replay != rd.last_replay ||
                      (!XLogRecPtrIsInvalid(received) && received > replay) ||
                      now_us < rd.busy_until_us;
    rd.last_replay = replay;
    if (busy)
      rd.interval = kBusyMs;
    else if (rd.notify_fd >= 0)
      return -1; // until WAL is written
    else
      rd.interval = std::min(rd.interval * 2, kIdleMs);
    return rd.interval;
  } catch (const pg::Error &e) {
    try {
      restart_at_replay(e.what());
    } catch (const pg::Error &e2) {
      pg::warn(std::string("WAL reader stopped: ") + e2.what());
      unwatch_wal_dir();
      rd.active = false;
      set_phase(shmem::kReaderDone);
      return -1;
    }
    return kBusyMs;
  }
}

} // namespace pgbs::worker
