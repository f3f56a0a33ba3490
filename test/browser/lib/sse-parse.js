// Incremental text/event-stream parser following the HTML Living Standard's
// "event stream interpretation" rules. Used by the pages (fetch() streaming
// path) and by the Node side (diagnostic probes). No dependencies.
(function (root) {
  'use strict';

  // Returns a parser; feed(text) returns the events completed by that text.
  // An event is {type, data, id, lastEventId}; comments are reported through
  // onComment (": heartbeat ..." and ": pgbus stream open ...").
  function createSSEParser(opts) {
    const onComment = (opts && opts.onComment) || function () {};
    const onRetry = (opts && opts.onRetry) || function () {};
    let buf = '';
    let pendingCR = false; // last chunk ended with CR: a following LF belongs to it
    let data = null;       // null = no data field seen in this event
    let type = '';
    let lastEventId = '';
    let idSeen = false;

    function line(l, out) {
      if (l === '') {
        if (data !== null) {
          out.push({ type: type || 'message', data, id: idSeen ? lastEventId : null, lastEventId });
        }
        data = null; type = ''; idSeen = false;
        return;
      }
      if (l[0] === ':') { onComment(l.slice(1).replace(/^ /, '')); return; }
      const c = l.indexOf(':');
      let field = c < 0 ? l : l.slice(0, c);
      let value = c < 0 ? '' : l.slice(c + 1);
      if (value[0] === ' ') value = value.slice(1);
      if (field === 'data') data = data === null ? value : data + '\n' + value;
      else if (field === 'event') type = value;
      else if (field === 'id') { if (value.indexOf('\0') < 0) { lastEventId = value; idSeen = true; } }
      else if (field === 'retry') { if (/^[0-9]+$/.test(value)) onRetry(Number(value)); }
    }

    return {
      feed(text) {
        const out = [];
        if (pendingCR && text[0] === '\n') text = text.slice(1);
        pendingCR = false;
        buf += text;
        let start = 0;
        for (let i = 0; i < buf.length; i++) {
          const ch = buf[i];
          if (ch === '\n' || ch === '\r') {
            line(buf.slice(start, i), out);
            if (ch === '\r') {
              if (i + 1 < buf.length) { if (buf[i + 1] === '\n') i++; }
              else pendingCR = true;
            }
            start = i + 1;
          }
        }
        buf = buf.slice(start);
        return out;
      },
      get lastEventId() { return lastEventId; },
    };
  }

  if (typeof module === 'object' && module.exports) module.exports = { createSSEParser };
  else root.createSSEParser = createSSEParser;
})(typeof self !== 'undefined' ? self : this);
