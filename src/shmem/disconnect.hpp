// Ending connections from SQL (pgbus_stream.disconnect()): a backend posts a
// request (a connection id, or a credential's sub) into a small mailbox in
// shared memory and sets every worker's latch; each worker, at its next turn,
// ends its matching connections, adds how many to the request and marks it
// handled. The backend waits (bounded) until every running worker handled
// it and returns the sum. docs/ARCHITECTURE.md, "Credentials that end".
#pragma once

extern "C" {
#include "postgres.h"
#include "port/atomics.h"
}

namespace pgbs::shmem {

constexpr int kDisconnectSlots = 16; // requests in flight at once (posters wait for room)

Size disconnect_size();
void disconnect_request();
void disconnect_startup(); // under AddinShmemInitLock

// One request as a worker sees it.
struct DisconnectWanted {
  uint64 seq;
  uint64 conn_id; // 0: by sub
  char sub[129];  // kIdentityBytes: the credential's sub (by_sub)
};

// Backend: posts a request, wakes the workers and waits up to timeout_ms for
// every running worker to handle it. Returns the connections ended; *late
// set when some worker did not answer in time (the count may then be short).
// Raises an error when the mailbox stays full for timeout_ms.
int64 disconnect_post(uint64 conn_id, const char *sub, int timeout_ms, bool *late);

// Worker w, at start: nothing posted before it concerns it.
void disconnect_worker_start(int w);
// Worker w: the requests it has not handled yet, oldest first (at most
// kDisconnectSlots), copied out.
int disconnect_pending(int w, DisconnectWanted *out);
// Worker w handled request seq, ending `ended` connections.
void disconnect_done(int w, uint64 seq, int64 ended);

} // namespace pgbs::shmem
