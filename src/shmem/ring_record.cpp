// The commit ring's record format (see ring_record.hpp).
#include "shmem/ring_record.hpp"

#include <algorithm>
#include <cstring>

namespace pgbs::ring {
namespace {

void copy_in(char *ring, uint64_t cap, uint64_t pos, const void *src, size_t len) {
  const uint64_t off = pos % cap;
  const size_t first = len < cap - off ? len : (size_t)(cap - off);
  memcpy(ring + off, src, first);
  if (first < len)
    memcpy(ring, (const char *)src + first, len - first);
}

} // namespace

size_t record_size(uint32_t data_len, uint32_t event_len, uint32_t visible_len) {
  const size_t n = sizeof(Header) + (size_t)data_len + event_len + visible_len;
  return (n + 7) & ~(size_t)7;
}

void write_record(char *ring, uint64_t cap, uint64_t pos, const Header &h, const char *payload) {
  static const char zeros[8] = {0};
  copy_in(ring, cap, pos, &h, sizeof(h));
  const size_t plen = (size_t)h.data_len + h.event_len + h.visible_len;
  if (plen > 0)
    copy_in(ring, cap, pos + sizeof(h), payload, plen);
  if (h.len > sizeof(h) + plen)
    copy_in(ring, cap, pos + sizeof(h) + plen, zeros, h.len - sizeof(h) - plen);
}

bool copy_span(const char *ring, uint64_t cap, uint64_t pos, uint64_t head,
               std::vector<char> *out) {
  out->clear();
  if (head - pos > cap)
    return false;
  const size_t len = (size_t)(head - pos);
  out->resize(len);
  const uint64_t off = pos % cap;
  const size_t first = len < cap - off ? len : (size_t)(cap - off);
  memcpy(out->data(), ring + off, first);
  if (first < len)
    memcpy(out->data() + first, ring, len - first);
  return true;
}

bool parse(const char *buf, size_t len, uint32_t dboid, std::vector<Event> *out,
           uint64_t *records) {
  for (size_t o = 0; o < len;) {
    Header h;
    if (len - o < sizeof(h))
      return false;
    memcpy(&h, buf + o, sizeof(h));
    const uint64_t plen = (uint64_t)h.data_len + h.event_len + h.visible_len;
    if (h.len < sizeof(Header) || h.len % 8 != 0 || h.len > len - o ||
        sizeof(Header) + plen > h.len)
      return false;
    const char *p = buf + o + sizeof(Header);
    o += h.len;
    (*records)++;
    if (h.dboid != dboid)
      continue;
    if (h.kind != Kind::Row && h.kind != Kind::Inline && h.kind != Kind::RowInline &&
        h.kind != Kind::Late && h.kind != Kind::Aborted)
      continue;
    Event ev;
    ev.stream_id = h.stream_id;
    ev.msg_id = h.msg_id;
    ev.commit_us = h.commit_us;
    ev.exclude = h.exclude;
    ev.late = h.kind == Kind::Late;
    if (h.kind == Kind::Aborted) {
      ev.aborted = true;
      ev.exclude = 0;
      ev.aborted_to = std::max(h.msg_id, (int64_t)h.exclude);
    }
    if (h.kind == Kind::Inline || h.kind == Kind::RowInline) {
      ev.has_payload = true;
      ev.ephemeral = h.kind == Kind::Inline;
      ev.ephemeral_seq = ev.ephemeral ? h.ephemeral_seq : 0;
      ev.data.assign(p, h.data_len);
      ev.event.assign(p + h.data_len, h.event_len);
      ev.visible_to.assign(p + h.data_len + h.event_len, h.visible_len);
    }
    out->push_back(std::move(ev));
  }
  return true;
}

} // namespace pgbs::ring
