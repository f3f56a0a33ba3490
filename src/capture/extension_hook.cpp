// CREATE and DROP EXTENSION pgbus_stream change the whole stream catalog
// without any catalog function running (the event triggers go with the
// extension): an object access hook marks such a transaction, so that at its
// commit the workers reload the catalog as after any catalog change. Without
// it a worker kept serving the streams of a dropped extension, and after a
// new CREATE EXTENSION went on deciding access from the old catalog.
#include "capture/capture.hpp"

extern "C" {
#include "postgres.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
}

#include <cstring>

namespace pgbs::capture {
namespace {

object_access_hook_type prev_object_access = nullptr;

// note_catalog_change only sets a flag (its effect comes at commit). The
// extension's own row still exists at OAT_DROP; at
// OAT_POST_CREATE the new row is not visible yet, so any CREATE EXTENSION
// counts (a catalog reload per CREATE EXTENSION costs nothing that matters).
void object_access(ObjectAccessType access, Oid class_id, Oid object_id, int sub_id, void *arg) {
  if (prev_object_access)
    prev_object_access(access, class_id, object_id, sub_id, arg);
  if (class_id != ExtensionRelationId)
    return;
  if (access == OAT_POST_CREATE) {
    note_catalog_change();
  } else if (access == OAT_DROP) {
    const char *name = get_extension_name(object_id);
    if (name != nullptr && strcmp(name, "pgbus_stream") == 0)
      note_catalog_change();
  }
}

} // namespace

void install_extension_hook() {
  prev_object_access = object_access_hook;
  object_access_hook = object_access;
}

} // namespace pgbs::capture
