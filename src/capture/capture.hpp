// Producer side: the capture triggers and transaction callbacks that turn
// committed inserts into ring records (docs/ARCHITECTURE.md, "Data path").
#pragma once

#include <cstdint>

namespace pgbs::capture {
// Registers the transaction and subtransaction callbacks (from _PG_init).
void install_callbacks();
// Marks that this transaction changed the stream catalog; at commit the
// workers are told to reload it.
void note_catalog_change();
// Raises an error unless the catalog records stream_id as the stream of
// table relid; the catalog is the one of the schema of function fn (Oids;
// stream_check.cpp).
void check_stream_table(int64_t stream_id, unsigned int relid, unsigned int fn);
// Finds a stream in the catalog of schema nsp by its name or by the pgbus
// gem's logical name, whatever the caller may read: its id, queue table and
// (if is_public is given) whether it is public. False when there is none.
bool find_stream(unsigned int nsp, const char *name, int64_t *id, char **schema, char **table,
                 bool *is_public);
} // namespace pgbs::capture
