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

// What presence reads in a row: the connection, its streams, its identity.
bool same_presence(const shmem::ConnSnapshot &a, const shmem::ConnSnapshot &b) {
  return a.conn_id == b.conn_id && a.nstreams == b.nstreams &&
         memcmp(a.stream_ids, b.stream_ids, sizeof(a.stream_ids[0]) * a.nstreams) == 0 &&
         a.has_identity == b.has_identity && strcmp(a.identity, b.identity) == 0;
}

uint64 presence_digest(const shmem::ConnSnapshot &r) {
  uint64 h = hash_bytes_extended((const unsigned char *)r.stream_ids,
                                 (int)(sizeof(r.stream_ids[0]) * r.nstreams), r.conn_id);
  if (r.has_identity)
    h ^= hash_bytes_extended((const unsigned char *)r.identity, (int)strlen(r.identity), h);
  return h;
}

} // namespace

bool ConnRows::fill(const Hub &hub, uint64_t conn_id, const http::ConnectionInfo &ci,
                    shmem::ConnSnapshot *r) {
  if (!hub.describe(conn_id, &streams_, &cursor_, &subscriber_, &state_))
    return false; // not yet decided
  memset(r, 0, sizeof(*r));
  r->conn_id = conn_id;
  r->connected_at_us = ci.connected_at_us;
  r->queued_events = (int64)ci.queued_events;
  r->queued_bytes = (int64)ci.queued_bytes;
  r->delivered = (int64)ci.delivered;
  r->dropped = (int64)ci.dropped;
  copy_text(r->remote, sizeof(r->remote), ci.remote_addr);
  copy_text(r->streams, sizeof(r->streams), streams_);
  copy_text(r->cursor, sizeof(r->cursor), cursor_);
  copy_text(r->subscriber, sizeof(r->subscriber), subscriber_);
  copy_text(r->state, sizeof(r->state), state_);
  if (hub.presence_of(conn_id, &ids_, &sub_)) {
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
  shmem::WorkerConns *wc = &shmem::shared()->worker_conns[worker_];
  std::vector<http::ConnectionInfo> infos = server.connections();
  std::vector<shmem::ConnSnapshot> rows;
  rows.reserve(std::min(infos.size(), (size_t)std::max(wc->capacity, 0)));
  uint64 digest = 0;
  shmem::ConnSnapshot r;
  for (const http::ConnectionInfo &ci : infos) {
    if ((int)rows.size() >= wc->capacity)
      break;
    if (!fill(hub, ci.conn_id, ci, &r))
      continue;
    digest += presence_digest(r); // a sum: independent of the order of the rows
    rows.push_back(r);
  }
  // Room and rows first: nothing under the lock allocates.
  LWLockAcquire(wc->lock, LW_EXCLUSIVE);
  if (!rows.empty())
    memcpy(wc->items, rows.data(), rows.size() * sizeof(shmem::ConnSnapshot));
  wc->count = (int)rows.size();
  LWLockRelease(wc->lock);
  passing_ = needs_rewrite_ = false; // every row is fresh
  const bool moved = digest != digest_;
  digest_ = digest;
  return moved;
}

void ConnRows::step(const Hub &hub, const http::Server &server) {
  if (!passing_)
    return;
  shmem::WorkerConns *wc = &shmem::shared()->worker_conns[worker_];
  const int count = wc->count; // only this process writes its rows
  const int end = std::min(count, next_ + kSlice);
  slice_.resize((size_t)kSlice);
  bool moved = false;
  http::ConnectionInfo ci;
  for (int i = next_; i < end; ++i) {
    const shmem::ConnSnapshot &old = wc->items[i];
    shmem::ConnSnapshot &r = slice_[(size_t)(i - next_)];
    if (!server.connection(old.conn_id, &ci) || !fill(hub, old.conn_id, ci, &r)) {
      passing_ = false; // gone, or no longer described: every row again
      needs_rewrite_ = true;
      return;
    }
    if (!same_presence(old, r)) {
      moved = true;
      digest_ += presence_digest(r) - presence_digest(old);
    }
  }
  if (end > next_) {
    LWLockAcquire(wc->lock, LW_EXCLUSIVE);
    memcpy(&wc->items[next_], slice_.data(), (size_t)(end - next_) * sizeof(shmem::ConnSnapshot));
    LWLockRelease(wc->lock);
  }
  next_ = end;
  if (next_ >= count)
    passing_ = false;
  if (moved) // a waiting subscription whose stream appeared, say
    shmem::presence_changed(worker_);
}

} // namespace pgbs::worker
