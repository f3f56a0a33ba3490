// Module entry: refuses to load outside shared_preload_libraries, defines
// the settings (settings/), requests shared memory and registers the
// background workers.
#include "settings/settings.hpp" // before postgres.h (core/ refuses to compile after it)
#include "capture/capture.hpp"
#include "capture/wal.hpp"
#include "pg/guard.hpp"
#include "shmem/awaited.hpp"
#include "shmem/disconnect.hpp"
#include "shmem/shared.hpp"
#include "shmem/standby.hpp"

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"

PG_MODULE_MAGIC;
void _PG_init(void);
}

static shmem_request_hook_type prev_shmem_request_hook = nullptr;
static shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

static void request_shmem() {
  if (prev_shmem_request_hook)
    prev_shmem_request_hook();
  pgbs::pg::entry([] {
    const pgbs::settings::Settings &s = pgbs::settings::load();
    pgbs::shmem::shmem_request(pgbs::settings::shmem_sizes(s));
    pgbs::shmem::awaited_request(s.max_pending_streams);
    return (Datum)0;
  });
  pgbs::shmem::standby_request();
  pgbs::shmem::disconnect_request();
}

static void startup_shmem() {
  if (prev_shmem_startup_hook)
    prev_shmem_startup_hook();
  pgbs::shmem::shmem_startup();
  pgbs::shmem::standby_startup();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  pgbs::shmem::awaited_startup();
  pgbs::shmem::disconnect_startup();
  LWLockRelease(AddinShmemInitLock);
}

static void register_workers() {
  for (int i = 0; i < pgbs::settings::current().workers; i++) {
    BackgroundWorker worker;
    memset(&worker, 0, sizeof(worker));
    worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    // On a hot standby, as soon as it accepts read-only connections.
    worker.bgw_start_time = BgWorkerStart_ConsistentState;
    worker.bgw_restart_time = 1;
    strlcpy(worker.bgw_library_name, "pgbus_stream", BGW_MAXLEN);
    strlcpy(worker.bgw_function_name, "pgbus_stream_worker_main", BGW_MAXLEN);
    snprintf(worker.bgw_name, BGW_MAXLEN, "pgbus_stream worker %d", i);
    strlcpy(worker.bgw_type, "pgbus_stream worker", BGW_MAXLEN);
    worker.bgw_main_arg = Int32GetDatum(i);
    RegisterBackgroundWorker(&worker);
  }
}

void _PG_init(void) {
  if (!process_shared_preload_libraries_in_progress)
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("pgbus_stream must be loaded via shared_preload_libraries"),
             errhint("Add pgbus_stream to shared_preload_libraries in postgresql.conf and restart "
                     "the server.")));
  pgbs::pg::entry([] {
    pgbs::settings::define();
    pgbs::settings::load();
    return (Datum)0;
  });
  pgbs::pg::init_error_copy();
  prev_shmem_request_hook = shmem_request_hook;
  shmem_request_hook = request_shmem;
  prev_shmem_startup_hook = shmem_startup_hook;
  shmem_startup_hook = startup_shmem;
  pgbs::capture::install_callbacks();
  pgbs::wal::register_rmgr();
  register_workers();
}
