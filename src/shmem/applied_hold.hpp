// The hold of a stream that logical replication writes (docs/ARCHITECTURE.md,
// "Rows applied by logical replication"). A subscription applies the
// publisher's transactions in its commit order, so a row whose id was drawn
// before a higher one already applied can still arrive. While a hold is in
// force no horizon of the stream passes it: cursors name the ids applied
// since as ranges, and the late row, above the hold, is streamed as any
// other. The hold moves up every window to the committed maximum of one
// window earlier, so every id stays above it for at least a window after it
// was committed, and ends once two windows passed without a commit.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace pgbs::shmem {

struct StreamEntry;

constexpr int64 kNoHold = -1;

// The hold in force for e at now_us (kNoHold: none), moved on first when a
// window passed. A spinlock over a few integers: callable from the commit
// callback, never raises an error.
int64 applied_hold(StreamEntry *e, int64 now_us);

// Whether a hold may be in force (an atomic read): the caller skips the
// clock and applied_hold() when not.
bool applied_hold_active(const StreamEntry *e);

// At the commit of rows applied into e, before its committed maximum moves:
// starts a hold at that maximum when none is in force (window_us 0: none).
void applied_hold_start(StreamEntry *e, int64 now_us, int64 window_us);

} // namespace pgbs::shmem
