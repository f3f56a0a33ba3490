// The worker on a node that replays WAL (a hot standby): what it must not do
// there and the sweep of the standby floor table (docs/ARCHITECTURE.md,
// "Standbys").
#pragma once

namespace pgbs::worker {

// True while this node is in recovery (a hot standby): nothing is written.
bool in_recovery();

// Drops the floors of transactions that ended without their COMMIT record
// (aborted on the primary, or the primary stopped between the two) and
// clears a floor overflow once every transaction up to it has ended.
// Returns false when no floor is held (no need to come back).
bool sweep_standby_floors();

} // namespace pgbs::worker
