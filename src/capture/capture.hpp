// Producer side: the capture triggers and transaction callbacks that turn
// committed inserts into ring records (docs/ARCHITECTURE.md, "Data path").
#pragma once

#include <cstdint>

struct TriggerData;
struct RelationData;

namespace pgbs::capture {
// Registers the transaction and subtransaction callbacks and the floor hooks
// (from _PG_init).
void install_callbacks();
// Publishes this transaction's floor for stream_id, the stream of table relid
// according to the catalog of the schema of function fn (else an error),
// before the statement that inserts into relid draws any msg_id.
void publish_floor(int64_t stream_id, unsigned int relid, unsigned int fn);
// The stream id argument arg of capture trigger tgoid, parsed once per
// trigger and backend (a trigger's arguments never change).
int64_t trigger_stream_id(unsigned int tgoid, const char *arg);
// The ExecutorStart and ProcessUtility (COPY FROM) hooks that call
// publish_floor() for the tables with a capture trigger (floor_hook.cpp).
void install_floor_hooks();
// The object access hook that marks CREATE and DROP EXTENSION pgbus_stream
// as catalog changes (extension_hook.cpp).
void install_extension_hook();
// Marks that this transaction changed the stream catalog; at commit the
// workers are told to reload it.
void note_catalog_change();
// Raises an error unless the catalog records stream_id as the stream of
// table relid; the catalog is the one of the schema of function fn (Oids;
// stream_check.cpp).
void check_stream_table(int64_t stream_id, unsigned int relid, unsigned int fn);
// The row of an AFTER INSERT FOR EACH ROW capture trigger fired in replica
// role (a subscription's apply worker): collected with collect_applied(), its
// id kept, no floor before it (applied.cpp).
void capture_applied_row(TriggerData *td, int64_t stream_id);
// One row a logical-replication subscription applied: collected
// like a captured insert of this transaction. message is the row's message
// column as a Datum (0 when null or absent). An id not above what this stream
// already committed cannot reach subscribers any more: it is reported with a
// WARNING, never refused (refusing would stop the subscription).
void collect_applied(int64_t stream_id, int64_t msg_id, uintptr_t message);
// Finds a stream in the catalog of schema nsp by its name or by the pgbus
// gem's logical name, whatever the caller may read: its id, queue table and
// (if is_public is given) whether it is public. False when there is none.
bool find_stream(unsigned int nsp, const char *name, int64_t *id, char **schema, char **table,
                 bool *is_public);
// The attribute numbers capture reads in a queue row: msg_id (bigint) and
// message (jsonb; 0 when the table has none). An error when msg_id is
// missing or either column has another type (a retyped column is never read
// as the wrong type). Checked once per relcache version (columns.cpp).
// seq is the sequence msg_id values come from (its identity or serial
// sequence; 0 when there is not exactly one).
struct QueueColumns {
  int msg_id = 0;
  int message = 0;
  unsigned int seq = 0;
};
QueueColumns queue_columns(RelationData *rel);
// The last value sequence seq handed out (to any backend; 0 when none yet),
// read whatever the caller's privileges on it.
int64_t sequence_last_value(unsigned int seq);
} // namespace pgbs::capture
