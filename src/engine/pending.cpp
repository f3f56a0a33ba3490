// Engine: stream lookup by name (with the unknown names remembered) and
// subscriptions that wait for a stream not born yet. docs/ARCHITECTURE.md,
// "The pgbus gem's queues".
#include "engine/engine.hpp"
#include "engine/state.hpp"

#include <algorithm>

namespace pgbs::engine {

Stream *Engine::lookup(const std::string &name, bool *failed) {
  if (Stream *st = find_by_name(name))
    return st;
  if (unknown_.count(name))
    return nullptr;
  CatalogFilter one;
  one.name = name;
  if (!load_streams(one)) {
    *failed = true;
    return nullptr;
  }
  Stream *st = find_by_name(name);
  if (st == nullptr && cfg_.negative_cache_size > 0) {
    while (unknown_order_.size() >= cfg_.negative_cache_size) {
      unknown_.erase(unknown_order_.front());
      unknown_order_.pop_front();
    }
    unknown_.insert(name);
    unknown_order_.push_back(name);
  }
  return st;
}

void Engine::forget_unknown() {
  unknown_.clear();
  unknown_order_.clear();
}

void Engine::catalog_state(uint64_t version, uint64_t births, bool complete) {
  if (version != cat_version_ || births != cat_births_) {
    forget_unknown();
    if (!pending_.empty())
      pending_lookup_ = true;
    cat_version_ = version;
    cat_births_ = births;
  }
  catalog_complete_ = complete && full_ok_;
}

// One query for every awaited name the engine does not know yet.
bool Engine::load_pending() {
  if (now_us_ < pending_retry_us_)
    return false;
  CatalogFilter which;
  for (const auto &[name, conns] : pending_)
    if (!by_name_.count(name))
      which.names.push_back(name);
  if (!which.names.empty() && !load_streams(which)) {
    pending_retry_us_ = now_us_ + 100 * 1000;
    return false;
  }
  pending_lookup_ = false;
  return true;
}

bool Engine::settle_pending() {
  bool needs_round = false;
  std::vector<Stream *> born;
  for (auto &[name, conns] : pending_) {
    Stream *st = find_by_name(name);
    if (st == nullptr)
      continue;
    if (!st->info.hooked) {
      // Created before anyone waited for it (or the creator could not know):
      // hooked here, as at a first subscription.
      if (now_us_ < pending_retry_us_)
        continue;
      st = hook(st);
      if (st == nullptr) {
        pending_retry_us_ = now_us_ + 100 * 1000;
        pending_lookup_ = true; // it may have been unloaded: read it again
        continue;
      }
    }
    if (now_us_ < pending_retry_us_ && !st->awake)
      continue;
    if (wake(*st) != Wake::Ok) {
      pending_retry_us_ = now_us_ + 100 * 1000;
      continue;
    }
    if (st->first_bounds) {
      needs_round = true;
      continue;
    }
    born.push_back(st);
  }
  for (Stream *st : born)
    start_pending(*st);
  if (!born.empty())
    continue_paging();
  return needs_round;
}

// The waiting subscriptions of a stream that now exists start at their
// cursor's position of it, else at 0: every row of the stream came after
// they subscribed. They page from there (table, then live).
void Engine::start_pending(Stream &st) {
  auto it = pending_.find(st.info.name);
  if (it == pending_.end())
    return;
  std::vector<Connection *> conns = std::move(it->second);
  pending_.erase(it);
  obs_.awaited(st.info.name, false);
  for (Connection *c : conns) {
    auto p = std::find_if(c->pending.begin(), c->pending.end(),
                          [&](const PendingSub &x) { return x.name == st.info.name; });
    if (p == c->pending.end())
      continue;
    Sub sub;
    sub.st = &st;
    if (p->has_pos && (p->pos.epoch == 0 || p->pos.epoch == st.info.id))
      sub.pos = p->pos;
    sub.pos.epoch = st.info.id;
    c->pending.erase(p);
    pending_subs_--;
    c->subs.push_back(sub);
    if (st.conns.empty()) {
      watched_.push_back(&st);
      obs_.watched(st.handle, true);
    }
    st.conns.push_back(c);
    st.one_line_conns += c->one_line;
    heat(st); // its subscription syncs when the horizon next moves
    obs_.subscribers(st.handle, 1);
    record_history(st.info.name, "connect", 0, 0);
    obs_.diagnostic(c->id, "subscribed", st.info.name, "stream born; since=" + conn_token(*c));
    born_conns_.push_back(c->id); // its presence (rows, events) now names the stream
    const size_t k = c->subs.size() - 1;
    demote(*c, k, c->subs[k].pos.horizon + 1);
  }
}

void Engine::unpend(const std::string &name, Connection *c) {
  auto it = pending_.find(name);
  if (it == pending_.end())
    return;
  auto &v = it->second;
  const size_t before = v.size();
  v.erase(std::remove(v.begin(), v.end(), c), v.end());
  pending_subs_ -= before - v.size();
  if (v.empty()) {
    pending_.erase(it);
    obs_.awaited(name, false);
  }
}

} // namespace pgbs::engine
