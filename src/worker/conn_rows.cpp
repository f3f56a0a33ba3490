// This worker's rows of connections() and presence() (worker/conn_rows.hpp).
#include "worker/conn_rows.hpp"

#include <algorithm>
#include <cstring>

extern "C" {
#include "postgres.h"
#include "common/hashfn.h"
#include "storage/lwlock.h"
}

namespace pgbs::worker {
namespace {

void copy_text(char *dst, size_t cap, const std::string &src) {
  size_t n = std::min(cap - 1, src.size());
  memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

// What presence reads in a row (the connection, its streams, its identity),
// hashed.
uint64 presence_digest(const shmem::ConnSnapshot &r) {
  uint64 h = hash_bytes_extended((const unsigned char *)r.stream_ids,
                                 (int)(sizeof(r.stream_ids[0]) * r.nstreams), r.conn_id);
  if (r.has_identity)
    h ^= hash_bytes_extended((const unsigned char *)r.identity, (int)strlen(r.identity), h);
  return h;
}

} // namespace

ConnRows::ConnRows(int worker_index)
    : worker_(worker_index), capacity_(std::max(shmem::conn_rows_capacity(worker_index), 0)),
      id_at_((size_t)capacity_), digest_at_((size_t)capacity_) {
  index_.reserve((size_t)capacity_);
  staged_.reserve((size_t)kSlice);
}

bool ConnRows::fill(const Hub &hub, uint64_t conn_id, const http::ConnectionInfo &ci,
                    shmem::ConnSnapshot *r) {
  if (!hub.engine().describe(conn_id, &streams_, &cursor_, &subscriber_, &state_))
    return false; // not yet decided
  memset(r, 0, sizeof(*r));
  r->conn_id = conn_id;
  r->connected_at_us = ci.connected_at_us;
  r->queued_events = (int64)ci.queued_events;
  r->queued_bytes = (int64)ci.queued_bytes;
  r->written = (int64)ci.written;
  r->overflow_dropped = (int64)ci.overflow_dropped;
  copy_text(r->remote, sizeof(r->remote), ci.remote_addr);
  copy_text(r->streams, sizeof(r->streams), streams_);
  copy_text(r->cursor, sizeof(r->cursor), cursor_);
  copy_text(r->subscriber, sizeof(r->subscriber), subscriber_);
  copy_text(r->state, sizeof(r->state), state_);
  bool wants_events;
  if (hub.engine().presence_of(conn_id, &ids_, &sub_, &wants_events)) {
    for (const auto &[id, name] : ids_)
      if (r->nstreams < shmem::kConnStreams)
        r->stream_ids[r->nstreams++] = id;
    r->has_identity = sub_.has_value();
    if (sub_)
      copy_text(r->identity, sizeof(r->identity), *sub_);
  }
  return true;
}

bool ConnRows::rewrite(const Hub &hub, const http::Server &server) {
  std::vector<http::ConnectionInfo> infos = server.connections();
  std::vector<shmem::ConnSnapshot> rows;
  rows.reserve(std::min(infos.size(), (size_t)capacity_));
  index_.clear();
  truncated_ = false;
  uint64 digest = 0;
  shmem::ConnSnapshot r;
  for (const http::ConnectionInfo &ci : infos) {
    if (!fill(hub, ci.conn_id, ci, &r))
      continue;
    if ((int)rows.size() >= capacity_) {
      truncated_ = true;
      break;
    }
    const int i = (int)rows.size();
    id_at_[(size_t)i] = r.conn_id;
    digest_at_[(size_t)i] = presence_digest(r);
    digest += digest_at_[(size_t)i]; // a sum: independent of the order of the rows
    index_[r.conn_id] = i;
    rows.push_back(r);
  }
  // Room and rows first: nothing under the lock allocates.
  count_ = (int)rows.size();
  shmem::set_conn_rows(worker_, rows.data(), count_);
  passing_ = rewrite_ = false; // every row is fresh
  const bool moved = digest != digest_;
  digest_ = digest;
  return moved;
}

bool ConnRows::apply(const Hub &hub, const http::Server &server, const std::vector<uint64_t> &ids) {
  int n = count_;
  bool moved = false;
  http::ConnectionInfo ci;
  shmem::ConnSnapshot r;
  for (uint64_t cid : ids) {
    auto it = index_.find(cid);
    if (server.connection(cid, &ci) && fill(hub, cid, ci, &r)) {
      const uint64 d = presence_digest(r);
      int to;
      if (it != index_.end()) { // changed: its row in place
        to = it->second;
        moved |= d != digest_at_[(size_t)to];
        digest_ += d - digest_at_[(size_t)to];
      } else if (n < capacity_) { // joined: a row at the end
        to = n++;
        id_at_[(size_t)to] = cid;
        index_.emplace(cid, to);
        digest_ += d;
        moved = true;
      } else {
        truncated_ = true; // no room (max_connections lowered by a reload, say)
        continue;
      }
      digest_at_[(size_t)to] = d;
      ops_.push_back(shmem::ConnRowMove{to, -1, (int)staged_.size()});
      staged_.push_back(r);
      if (staged_.size() >= (size_t)kSlice)
        flush(n);                    // staged rows bounded
    } else if (it != index_.end()) { // left: the last row takes its place
      const int at = it->second, last = n - 1;
      digest_ -= digest_at_[(size_t)at];
      index_.erase(it);
      if (at != last) {
        id_at_[(size_t)at] = id_at_[(size_t)last];
        digest_at_[(size_t)at] = digest_at_[(size_t)last];
        index_[id_at_[(size_t)at]] = at;
        ops_.push_back(shmem::ConnRowMove{at, last, -1});
      }
      n--;
      moved = true;
      if (truncated_)
        rewrite_ = true; // room for a connection that had none
    }
  }
  flush(n);
  return moved;
}

void ConnRows::flush(int count) {
  if (ops_.empty() && count == count_)
    return;
  // Planned by apply(): under the lock only copies, in order, and the count.
  shmem::move_conn_rows(worker_, ops_.data(), ops_.size(), staged_.data(), count);
  count_ = count;
  ops_.clear();
  staged_.clear();
}

bool ConnRows::update(Hub &hub, const http::Server &server) {
  const bool complete = hub.take_changed(&changed_);
  if (!complete || rewrite_)
    return rewrite(hub, server);
  return !changed_.empty() && apply(hub, server, changed_);
}

void ConnRows::step(const Hub &hub, const http::Server &server) {
  if (!passing_)
    return;
  const int end = std::min(count_, next_ + kSlice);
  slice_.resize((size_t)kSlice);
  stale_.clear();
  bool moved = false;
  http::ConnectionInfo ci;
  for (int i = next_; i < end; ++i) {
    const uint64_t cid = id_at_[(size_t)i];
    shmem::ConnSnapshot &r = slice_[(size_t)(i - next_)];
    if (!server.connection(cid, &ci) || !fill(hub, cid, ci, &r)) {
      r = shmem::own_conn_row(worker_, i); // gone, or no longer described: removed below
      stale_.push_back(cid);
      continue;
    }
    const uint64 d = presence_digest(r);
    if (d != digest_at_[(size_t)i]) {
      moved = true;
      digest_ += d - digest_at_[(size_t)i];
      digest_at_[(size_t)i] = d;
    }
  }
  if (end > next_)
    shmem::put_conn_rows(worker_, next_, slice_.data(), end - next_);
  next_ = end;
  if (!stale_.empty())
    moved |= apply(hub, server, stale_);
  if (next_ >= count_)
    passing_ = false;
  if (moved) // a waiting subscription whose stream appeared, say
    shmem::presence_changed(worker_);
}

} // namespace pgbs::worker
