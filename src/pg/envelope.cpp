// A queue row's message to the parts of its event (see envelope.hpp).
#include "pg/envelope.hpp"

#include <cstring>

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
}

namespace pgbs::pg {

namespace {

// One value as ->> gives it: a string's bytes where they are, any other
// scalar or container as its JSON text, nothing for null.
void value_text(const JsonbValue *v, const char **text, size_t *len) {
  *text = nullptr;
  *len = 0;
  switch (v->type) {
  case jbvString:
    *text = v->val.string.val;
    *len = (size_t)v->val.string.len;
    return;
  case jbvNumeric:
    *text = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
    break;
  case jbvBool:
    *text = v->val.boolean ? "true" : "false";
    break;
  case jbvBinary:
    *text = JsonbToCString(nullptr, v->val.binary.data, v->val.binary.len);
    break;
  default: // jbvNull; a container member always comes as jbvBinary
    return;
  }
  *len = strlen(*text);
}

} // namespace

void read_envelope(const void *jsonb, Envelope *out) {
  Jsonb *jb = (Jsonb *)jsonb;
  *out = Envelope();
  static const char *const keys[Envelope::kParts] = {"html", "event", "visible_to", "exclude"};
  bool has_html = false;
  if (JB_ROOT_IS_OBJECT(jb))
    for (int p = 0; p < Envelope::kParts; p++) {
      JsonbValue buf;
      const JsonbValue *v =
          getKeyJsonValueFromContainer(&jb->root, keys[p], (uint32)strlen(keys[p]), &buf);
      if (v == nullptr)
        continue;
      has_html |= p == Envelope::Data;
      value_text(v, &out->text[p], &out->len[p]);
    }
  if (!has_html) {
    // The message's JSON text, in one allocation of about its size.
    out->text[Envelope::Data] = JsonbToCString(nullptr, &jb->root, (int)VARSIZE(jb));
    out->len[Envelope::Data] = strlen(out->text[Envelope::Data]);
  }
}

} // namespace pgbs::pg
