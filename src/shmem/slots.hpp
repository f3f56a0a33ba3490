// The producers' in-flight slots (docs/ARCHITECTURE.md, "The horizon"): per
// PGPROC, the floors of the streams the open transaction may insert into,
// written by that backend only and read by the workers without a lock
// (seqlock: a generation bumped when the entries are cleared). A bitmap of
// active slots lets readers visit only the transactions in flight.
#pragma once

#include "shmem/shared.hpp"

#include <vector>

namespace pgbs::shmem {

// This backend's slot. slot_open: the transaction's first floor is about to
// be published (first: the slot's bit is set, a full barrier). slot_publish
// publishes floor n (n >= kSlotStreams: every horizon of the database is held
// instead), then a full barrier: the floor is visible before the statement
// draws any msg_id. slot_clear withdraws them all. Atomics only: nothing
// can fail, callable from the commit callback.
void slot_open(Oid dboid, bool first);
void slot_publish(int n, int64 stream_id, int64 floor);
void slot_clear();

// Reader: appends the floors the producers of dboid published to *out; true
// when every horizon of dboid must be held (a wildcard slot, or one that
// never settled while read).
bool copy_slot_floors(Oid dboid, std::vector<SlotEntry> *out);

} // namespace pgbs::shmem
