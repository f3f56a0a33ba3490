// SSE frame encoding (pgbus wire format, README "Wire format"). Pure C++, no PostgreSQL.
#pragma once
#include "core/no_postgres.hpp"

#include <string>
#include <string_view>

namespace pgbs::sse {

// Appends one SSE event: "id: <id>\n" (omitted when id is empty),
// "event: <event>\n" (omitted when empty), then one "data: " line per line of
// `data`, lines split on CRLF, CR and LF (a trailing line break yields a final
// empty data line, an empty payload yields one empty "data:" line), then the
// blank line that ends the event. Every data line is "data: <line>\n", so an
// empty line is "data: \n". NUL bytes in `data` are dropped. `id` and
// `event` must already be valid (wire::valid_event_name); CR/LF in them are
// dropped defensively so that a frame can never be split.
void append_event(std::string &out, std::string_view id, std::string_view event,
                  std::string_view data);

// The pgbus gem's framing of the same event (its routes, README "Wire
// format"): one "data: " line holding `data` with every CR, LF and NUL
// removed, so that a parser which trims each data line and joins them with
// nothing (the gem's element) reads what the gem sends.
void append_event_one_line(std::string &out, std::string_view id, std::string_view event,
                           std::string_view data);

// The one-line form of an event append_event() wrote (no id line), derived
// from its bytes: its data lines joined with nothing. Equal to
// append_event_one_line() of the same event and data.
std::string one_line_frame(std::string_view frame);
// True when a frame of append_event() has a single data line: its one-line
// form is the frame itself (a payload without line breaks, the usual case).
bool has_one_data_line(std::string_view frame);

// Appends ": <text>\n\n"; CR/LF/NUL in text become spaces.
void append_comment(std::string &out, std::string_view text);

// Appends "retry: <ms>\n\n".
void append_retry(std::string &out, long ms);

// JSON string escaping (without the surrounding quotes): ", \, control
// characters as \uXXXX / \n etc. Bytes >= 0x80 are copied as they are.
std::string json_escape(std::string_view s);

} // namespace pgbs::sse
