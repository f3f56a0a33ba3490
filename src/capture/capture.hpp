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
} // namespace pgbs::capture
