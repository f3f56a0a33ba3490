// Which tables can be taken as a queue (or its archive): the one rule, for
// attach() and the event triggers (through pgbus_stream._queue_problem) and
// for the worker before each statement on a queue (docs/ARCHITECTURE.md,
// "Whose rights").
#pragma once

#include <cstddef>

namespace pgbs::pg {

// Writes why relation relid cannot be taken as a queue or archive table into
// why (at most len bytes; e.g. "it is a view") and returns false; true, with
// *owner its owner's role id, when it can: a plain or partitioned table
// without rules, with PGMQ's columns (msg_id bigint, read_ct integer,
// enqueued_at and vt timestamptz, message jsonb; headers, if present,
// jsonb), whose partitions and children are plain or partitioned tables
// without rules and of the same owner. Takes no lock (the caller does, to
// keep the answer true). Main thread, inside PostgreSQL: may elog(ERROR).
bool queue_table_ok(unsigned relid, unsigned *owner, char *why, size_t len);

} // namespace pgbs::pg
