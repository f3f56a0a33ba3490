// The pgbus gem's stream names (see names.hpp).
#include "core/names.hpp"
#include "core/text.hpp"

#include <algorithm>

namespace pgbs::names {
namespace {

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

template <typename F> void for_each_item(std::string_view patterns, F f) {
  while (true) {
    const size_t comma = patterns.find(',');
    f(text::trim(patterns.substr(0, comma), " "));
    if (comma == std::string_view::npos)
      return;
    patterns.remove_prefix(comma + 1);
  }
}

} // namespace

std::string normalize(std::string_view name) {
  bool plain = !name.empty();
  for (char c : name)
    plain = plain && word_char(c);
  if (plain)
    return std::string(name);
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == '-' || c == '.' || c == ':')
      c = '_';
    else if (!word_char(c))
      continue;
    if (c == '_' && (out.empty() || out.back() == '_'))
      continue; // collapses runs and drops leading "_"
    out.push_back(c);
  }
  while (!out.empty() && out.back() == '_')
    out.pop_back();
  return out;
}

std::string queue_name(std::string_view logical, QueueNameError *err, std::string_view prefix) {
  *err = QueueNameError::None;
  if (logical.empty()) {
    *err = QueueNameError::Empty;
    return {};
  }
  std::string full(prefix);
  full.append(logical);
  std::string q = normalize(full);
  // A logical name the normalisation empties (":", "...", "é") would name
  // the bare prefix (or a shorter queue): no stream of the gem's.
  if (q.size() <= prefix.size()) {
    *err = QueueNameError::Empty;
    return {};
  }
  if (q.size() > kMaxQueueName) {
    *err = QueueNameError::TooLong;
    return {};
  }
  for (char &c : q)
    c = lower(c);
  return q;
}

std::string echo(std::string_view text, size_t max) {
  if (text.size() <= max)
    return std::string(text);
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80)
    cut--; // not inside a multi-byte character
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

bool auto_attach_matches(std::string_view patterns, std::string_view queue) {
  bool hit = false;
  for_each_item(patterns, [&](std::string_view item) {
    if (hit || item.empty())
      return;
    if (item.find('*') == std::string_view::npos)
      hit = item.size() <= queue.size() &&
            text::glob(item, queue.substr(0, item.size()), text::Case::Insensitive);
    else
      hit = text::glob(item, queue, text::Case::Insensitive);
  });
  return hit;
}

bool valid_auto_attach(std::string_view patterns) {
  bool ok = true;
  for_each_item(patterns, [&](std::string_view item) {
    if (item.size() > kMaxQueueName)
      ok = false;
    for (char c : item)
      ok = ok && (word_char(c) || c == '*');
  });
  return ok;
}

bool gem_stream(std::string_view logical, GemStream *out) {
  *out = GemStream();
  QueueNameError err = QueueNameError::None;
  std::string queue = queue_name(logical, &err);
  if (err != QueueNameError::None || queue.size() <= kGemPrefix.size() ||
      queue.compare(0, kGemPrefix.size(), kGemPrefix) != 0)
    return false;
  out->short_name = queue.substr(kGemPrefix.size());
  out->table = "q_" + queue;
  out->queue = std::move(queue);
  for (std::string_view n :
       {logical, std::string_view(out->short_name), std::string_view(out->queue)})
    if (std::find(out->names.begin(), out->names.end(), n) == out->names.end())
      out->names.emplace_back(n);
  return true;
}

bool is_gem_queue(const GemStream &gs, std::string_view schema, std::string_view table) {
  return !gs.table.empty() && table == gs.table && (schema == "pgmq" || schema == kExtensionSchema);
}

bool gem_stream_named(std::string_view logical, std::string_view name) {
  GemStream gs;
  return gem_stream(logical, &gs) &&
         std::find(gs.names.begin(), gs.names.end(), name) != gs.names.end();
}

} // namespace pgbs::names
