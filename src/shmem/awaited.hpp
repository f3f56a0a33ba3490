// Streams awaited by pending subscriptions (docs/ARCHITECTURE.md, "The pgbus
// gem's queues"): a bounded set of (database, stream name) with one bit per
// worker that has a subscription waiting for that stream, and a counter of
// streams born without attach(). The auto-attach event trigger hooks an
// awaited queue in the transaction that creates it, so that its first send is
// captured; the counter tells the workers to look up what they await.
#pragma once

extern "C" {
#include "postgres.h"
#include "port/atomics.h"
}

namespace pgbs::shmem {

Size awaited_size();
void awaited_request(int capacity); // max_pending_streams
void awaited_startup(); // under AddinShmemInitLock

// Worker w awaits (on) or no longer awaits (off) the stream `name` of dboid.
// false when `on` found no free place (pgbus_stream.max_pending_streams).
bool await_stream(Oid dboid, const char *name, int w, bool on);
// Whether some worker awaits the stream.
bool stream_awaited(Oid dboid, const char *name);
// Worker start: drops what a previous process in slot w awaited.
void clear_awaited(int w);
// Streams born without attach() since the server started.
uint64 stream_births();
// Called at commit of a transaction that made such a stream (nothing here can fail).
void note_births();

// Per-worker figures of workers(): catalog reads the worker ran, and its
// subscriptions waiting for a stream.
void publish_lookup_figures(int w, uint64 catalog_reads, uint64 pending);
void lookup_figures(int w, uint64 *catalog_reads, uint64 *pending);

} // namespace pgbs::shmem
