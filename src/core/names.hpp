// The pgbus gem's stream names: the queue a logical stream name maps to, and
// which queues pgbus_stream.auto_attach captures. One place for these rules;
// the SQL functions call them. Pure C++, no PostgreSQL.
#pragma once
#include "core/no_postgres.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace pgbs::names {

// PGMQ's limit on queue names (its tables are q_<name> and a_<name>).
constexpr size_t kMaxQueueName = 47;
// The gem's queue prefix, for streams and jobs alike.
constexpr std::string_view kGemPrefix = "pgbus_";

enum class QueueNameError { None, Empty, TooLong };

// The queue the gem uses for a logical stream name: prefix + logical,
// normalised as the gem does (kept as it is when it consists of
// [A-Za-z0-9_] only; else "-", "." and ":" become "_", any other character
// outside [A-Za-z0-9_] is dropped, runs of "_" collapse to one and leading
// and trailing "_" go), then lower-cased as PGMQ stores it. Empty with *err
// set when the logical name is empty, keeps no character once normalised
// (":", "...", "é": Empty), or the result is longer than kMaxQueueName (the
// gem refuses those before creating anything).
std::string queue_name(std::string_view logical, QueueNameError *err,
                       std::string_view prefix = kGemPrefix);

// The gem's normalisation alone (no prefix, no case change, no length check).
std::string normalize(std::string_view name);

// ---- the stream a gem name opens ------------------------------------------
// The gem writes a logical name's messages to PGMQ queue queue_name(logical),
// table pgmq.q_<queue>; create_stream() makes the same queue name (table
// q_<queue> in this extension's schema when PGMQ is not installed). The
// catalog holds that stream under the logical name itself (create_stream,
// attach), the queue without its prefix (auto_attach) or the whole queue
// name (auto_attach, when the short one was taken). A gem name (a signed
// name; broadcast() for a name that is not a stream's) means only the
// stream whose queue table is that one, whichever stream holds one of
// those names: the worker and SQL both decide with is_gem_queue().

// The extension's schema (fixed by the control file: not relocatable).
constexpr std::string_view kExtensionSchema = "pgbus_stream";

struct GemStream {
  std::string table;              // "q_" + queue_name(logical)
  std::vector<std::string> names; // catalog names it may have, in the order to try (distinct)
  std::string short_name;         // the name auto_attach gives it unless another stream has it
  std::string queue;              // the name auto_attach gives it otherwise
};
// False when the gem refuses the name (empty, too long, nothing left once
// normalised).
bool gem_stream(std::string_view logical, GemStream *out);
// Whether a stream whose queue table is schema.table is gs's.
bool is_gem_queue(const GemStream &gs, std::string_view schema, std::string_view table);
// Whether `name` is one of the catalog names of the gem's stream for logical.
bool gem_stream_named(std::string_view logical, std::string_view name);

// Whether a queue name matches an auto_attach setting: a comma-separated
// list of patterns (spaces around items ignored), "*" matching any run of
// characters; an item without "*" is a prefix ("pgbus_" = "pgbus_*").
// Case-insensitive, as PGMQ queue names are. An empty setting matches nothing.
bool auto_attach_matches(std::string_view patterns, std::string_view queue);

// Whether a setting is a valid auto_attach value (for the GUC check hook):
// items of [A-Za-z0-9_*], at most kMaxQueueName characters each.
bool valid_auto_attach(std::string_view patterns);

// What an error message shows of a caller's text: at most kEchoMax bytes
// (cut on a UTF-8 character boundary), then "..." and the full size, so
// that a 10 MB argument costs its error 100 bytes, not 10 MB in the log.
constexpr size_t kEchoMax = 64;
std::string echo(std::string_view text, size_t max = kEchoMax);

} // namespace pgbs::names
