// Open files of a worker: how many sockets it may hold.
#pragma once

namespace pgbs::worker {

// Raises the soft open-files limit to the hard one, leaves PostgreSQL what
// fd.c counted on for its own files (cut to half the limit when the limit is
// low) and returns the sockets the rest allows (0 when the limit cannot be
// read). Logs whether worker `worker_index` can hold its share of
// max_connections. Called once, at start.
int plan_file_limit(int worker_index);

} // namespace pgbs::worker
