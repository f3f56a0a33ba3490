// Presence events (engine/presence.hpp).
#include "engine/presence.hpp"
#include "core/wire.hpp"

#include <algorithm>

namespace pgbs::engine {

void PresenceFeed::add(uint64_t conn_id,
                       const std::vector<std::pair<int64_t, std::string>> &streams) {
  if (conns_.count(conn_id))
    return;
  Conn &c = conns_[conn_id];
  for (const auto &[id, name] : streams) {
    Watched &w = streams_[id];
    w.name = name;
    w.conns.push_back(conn_id);
    c.streams.push_back(id);
    c.owed.insert(id);
  }
  owed_ += c.owed.size();
}

void PresenceFeed::remove(uint64_t conn_id) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end())
    return;
  owed_ -= it->second.owed.size();
  for (int64_t id : it->second.streams) {
    auto w = streams_.find(id);
    if (w == streams_.end())
      continue;
    auto &v = w->second.conns;
    v.erase(std::remove(v.begin(), v.end(), conn_id), v.end());
    if (v.empty())
      streams_.erase(w);
  }
  conns_.erase(it);
}

std::vector<int64_t> PresenceFeed::streams() const {
  std::vector<int64_t> out;
  out.reserve(streams_.size());
  for (const auto &[id, w] : streams_)
    out.push_back(id);
  return out;
}

void PresenceFeed::update(const std::map<int64_t, PresenceCounts> &now, const Push &push) {
  static const PresenceCounts kNone;
  for (auto &[id, w] : streams_) {
    auto found = now.find(id);
    const PresenceCounts &counts = found == now.end() ? kNone : found->second;
    std::vector<std::string> changes;
    auto a = w.counts.begin();
    auto b = counts.begin();
    while (a != w.counts.end() || b != counts.end()) {
      if (b == counts.end() || (a != w.counts.end() && a->first < b->first)) {
        changes.push_back(wire::presence_change_frame(w.name, a->first, false, 0));
        ++a;
      } else if (a == w.counts.end() || b->first < a->first) {
        changes.push_back(wire::presence_change_frame(w.name, b->first, true, b->second));
        ++b;
      } else {
        if (a->second != b->second)
          changes.push_back(
              wire::presence_change_frame(w.name, a->first, b->second > a->second, b->second));
        ++a;
        ++b;
      }
    }
    for (uint64_t conn_id : w.conns) {
      Conn &c = conns_[conn_id];
      if (c.owed.count(id)) {
        if (push(conn_id, wire::presence_snapshot_frame(w.name, counts))) {
          c.owed.erase(id);
          owed_--;
        }
        continue;
      }
      for (const std::string &f : changes)
        if (!push(conn_id, f)) {
          c.owed.insert(id); // a fresh snapshot replaces what it missed
          owed_++;
          break;
        }
    }
    w.counts = counts;
  }
}

} // namespace pgbs::engine
