// Producer side: the capture triggers and transaction callbacks that turn
// committed inserts into ring records (docs/ARCHITECTURE.md, "Data path").
#pragma once

namespace pgbs::capture {
// Registers the transaction and subtransaction callbacks (from _PG_init).
void install_callbacks();
// Marks that this transaction changed the stream catalog; at commit the
// workers are told to reload it.
void note_catalog_change();
} // namespace pgbs::capture
