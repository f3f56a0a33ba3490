// Direct writes and socket takeover (docs/ARCHITECTURE.md, "HTTP: direct
// writes"). Once a stream's head and first frames went out through MHD and
// its queue ran empty, the server writes the stream's chunks to the socket
// itself; then it takes the socket over, so that MHD frees its
// per-connection memory (most of an idle stream's cost), and ends the stream
// itself.
//
// MHD 0.9.75 lets an application take a socket only with a 101 upgrade, and
// its close of a connection shuts the socket down (SHUT_WR), which a dup()
// would share. So the takeover keeps a duplicate of the socket and points
// MHD's descriptor number at a fresh unconnected socket (dup3) while the
// connection is suspended (not in MHD's epoll set); MHD, resumed, calls the
// content reader once more, is told the response failed, and closes and
// frees what is now its dummy socket.
#include "server_impl.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace pgbs::http {

// Called from the content reader with MHD's buffer for this socket empty (it
// asks for more only once the last chunk is out) and the connection suspended.
void Server::Impl::enter_direct(Conn *c) {
  if (c->direct || !c->watched || c->fd < 0)
    return; // not in the outer epoll set: MHD keeps writing it
  int one = 1, zero = 0;
  (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); // each write leaves at once
  (void)setsockopt(c->fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
  c->direct = true;
  if (!c->adopting && !c->owned) {
    c->adopting = true;
    adopt.push_back(c->id);
  }
}

void Server::Impl::leave_direct(Conn *c) {
  if (!c->direct)
    return;
  set_out(c, false);
  c->direct = false;
  c->unsent.clear();
}

void Server::Impl::set_out(Conn *c, bool on) {
  if (c->want_out == on || !c->watched)
    return;
  epoll_event ev{};
  ev.events = EPOLLRDHUP | (on ? EPOLLOUT : 0u);
  ev.data.u64 = c->id | kConnTag;
  if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
    c->want_out = on;
}

// Writes a direct stream's queue as HTTP/1.1 chunks (HTTP/1.0: raw bytes), one
// send per chunk of up to the scratch size; what the socket does not take
// waits in c->unsent with EPOLLOUT armed. A stream that is ending and fully
// written gets its last chunk and is closed here if its socket is owned, and
// goes back to MHD (which does the same) otherwise.
void Server::Impl::flush(Conn *c) {
  if (!c->direct || c->kill)
    return;
  auto send_some = [&](const char *p, size_t len) -> bool { // false: stop here
    const ssize_t w = ::send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      abort_conn(c, "client");
      return false;
    }
    const size_t done = w > 0 ? static_cast<size_t>(w) : 0;
    if (done < len) {
      c->unsent.assign(p + done, len - done);
      set_out(c, true);
      return false;
    }
    return true;
  };
  if (!c->unsent.empty()) {
    std::string rest;
    rest.swap(c->unsent);
    if (!send_some(rest.data(), rest.size()))
      return;
  }
  c->delivered = c->copied;
  if (scratch.empty())
    scratch.resize(64 * 1024);
  constexpr size_t kHead = 8; // "ffffff\r\n" at most, written right before the data
  for (int round = 0; round < 4; ++round) {
    const size_t n = fill(c, scratch.data() + kHead, scratch.size() - kHead - 2);
    if (n == 0)
      break;
    char *start = scratch.data() + kHead;
    size_t len = n;
    if (!c->http10) {
      char digits[16]; // the chunk size in hex, lowest digit first
      size_t nd = 0;
      for (size_t v = n; v > 0 || nd == 0; v >>= 4)
        digits[nd++] = "0123456789abcdef"[v & 15];
      start -= nd + 2; // "<size>\r\n" right before the data (kHead has room)
      for (size_t k = 0; k < nd; ++k)
        start[k] = digits[nd - 1 - k];
      start[nd] = '\r';
      start[nd + 1] = '\n';
      memcpy(scratch.data() + kHead + n, "\r\n", 2);
      len += nd + 2 + 2;
    }
    if (!send_some(start, len))
      return;
    c->delivered = c->copied;
  }
  set_out(c, false);
  if (!c->queue.empty()) {
    notify(c); // more than four chunks: the rest in the next round
  } else if (c->ending && c->owned) {
    if (!c->end_sent) {
      c->end_sent = true;
      if (!c->http10 && !send_some("0\r\n\r\n", 5))
        return; // the rest of it on EPOLLOUT, then here again
    }
    reap.push_back(c->id);
  } else if (c->ending) {
    leave_direct(c);
    wake(c); // MHD calls the reader: END_OF_STREAM
  }
}

void Server::Impl::flush_dirty() {
  if (dirty.empty())
    return;
  std::vector<uint64_t> list;
  list.swap(dirty);
  for (uint64_t id : list) {
    auto it = conns.find(id);
    if (it == conns.end())
      continue;
    it->second->dirty = false;
    if (it->second->direct && it->second->unsent.empty())
      flush(it->second); // one blocked on its socket waits for EPOLLOUT
  }
}

// Takes over the sockets of streams that entered direct writes (see the top
// of this file). Runs outside MHD's callbacks; a connection that cannot be
// taken over (no descriptor to spare) simply stays with MHD.
void Server::Impl::adopt_all() {
  if (adopt.empty())
    return;
  std::vector<uint64_t> list;
  list.swap(adopt);
  for (uint64_t id : list) {
    auto it = conns.find(id);
    if (it == conns.end())
      continue;
    Conn *c = it->second;
    c->adopting = false;
    if (c->owned || !c->direct || !c->suspended || c->kill || c->ending || c->fd < 0)
      continue;
    const int mine = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
    if (mine < 0)
      continue;
    const int dummy = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (dummy < 0) {
      ::close(mine);
      continue;
    }
    const bool out = c->want_out;
    unwatch(c); // the outer epoll entry names MHD's descriptor number
    c->want_out = false;
    const bool swapped = dup3(dummy, c->fd, O_CLOEXEC) >= 0;
    ::close(dummy);
    if (!swapped) {
      ::close(mine);
      watch(c);
      set_out(c, out);
      continue;
    }
    c->fd = mine;
    c->owned = true;
    if (c->sock) {
      c->sock->current = nullptr;
      c->sock = nullptr;
    }
    ++detach_logs;
    wake(c); // MHD calls the reader, which ends MHD's side (on_read)
    watch(c);
    if (!c->watched) {
      abort_conn(c, "server"); // a close could not be noticed
      continue;
    }
    set_out(c, out);
  }
}

// Ends owned streams marked for closing (by abort_conn() or a graceful end
// that was written out); outside any walk of conns, since it erases them.
void Server::Impl::reap_all() {
  if (reap.empty())
    return;
  std::vector<uint64_t> list;
  list.swap(reap);
  for (uint64_t id : list) {
    auto it = conns.find(id);
    if (it != conns.end() && it->second->owned)
      close_owned(it->second);
  }
}

void Server::Impl::close_owned(Conn *c) {
  leave_direct(c);
  unwatch(c);
  if (c->fd >= 0) {
    if (!c->kill)
      ::shutdown(c->fd, SHUT_RDWR);
    ::close(c->fd);
    c->fd = -1;
  }
  conns.erase(c->id);
  if (c->phase == Phase::Open)
    --open_count;
  if (c->handed_out)
    closed.emplace_back(c->id, c->close_reason.empty() ? "client" : c->close_reason);
  c->finished = true;
  dispose(c);
}

// Frees a connection nobody refers to any more: not the engine (its handle),
// not MHD (an owned stream's request until MHD reported it completed).
void Server::Impl::dispose(Conn *c) {
  if (c->held) {
    finished.insert(c);
    return;
  }
  finished.erase(c);
  if (!c->mhd_attached || !c->owned)
    delete c;
}

} // namespace pgbs::http
