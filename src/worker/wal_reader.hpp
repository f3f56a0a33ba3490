// The WAL reader of a node in recovery (a hot standby): worker 0 reads the
// capture's logical messages (capture/wal.hpp) back from the WAL this node's
// startup process has replayed, up to the replay position, and applies them
// to shared memory as a local commit would (docs/ARCHITECTURE.md,
// "Standbys"). Nothing is hooked into redo: a node without the library
// replays the same WAL unharmed.
#pragma once

namespace pgbs::worker {

// Worker 0, at start: begins where a previous process of this worker
// stopped, else at the redo point this node's recovery started from. On a
// node not in recovery there is nothing to read.
void wal_reader_start();

// A file descriptor that turns readable when WAL is written into pg_wal
// (inotify, Linux), for the worker's wait set; -1 when there is none (then
// pump() asks for a timer instead).
int wal_reader_fd();

// Worker 0, every turn: reads and applies what was replayed since (a
// bounded amount per turn). Returns how soon to look again in ms, -1 when
// no timer is needed (WAL written wakes the worker through wal_reader_fd(),
// or nothing is left to read: not in recovery, the last replayed message
// read). Never raises: a failure is logged and the reader starts afresh at
// the replay position, holding every horizon until the transactions then
// in progress have ended.
long wal_reader_pump();

} // namespace pgbs::worker
