// What a queue row's message (jsonb) gives its event: the one rule, for
// capture (payloads that travel in the ring) and for the worker (rows read
// back from the table). An object's "html" member is the data, any other
// message's JSON text is; an object's "event", "visible_to" and "exclude"
// members name the event, its audience and a connection that does not get
// it. A member reads as ->> reads it: a string's text, any other value's
// JSON text, nothing when it is null or absent.
#pragma once

#include <cstddef>

namespace pgbs::pg {

struct Envelope {
  enum Part { Data, Event, VisibleTo, Exclude, kParts };
  const char *text[kParts] = {}; // nullptr: none
  size_t len[kParts] = {};
};

// Reads a detoasted jsonb value (a Jsonb *). The texts point into it, or
// into memory palloc'd in the current context (a member that is no
// string). Main thread, inside PostgreSQL: may elog(ERROR).
void read_envelope(const void *jsonb, Envelope *out);

} // namespace pgbs::pg
