// The buyer's side of the storefront: sign in, a countdown on the server's clock, and the buy
// (path token, order, then the result told on a stream of events, or polled with back-off). Plain JS, no framework: the page
// itself is static, everything that moves comes from the JSON API.
(function () {
  'use strict';

  var TOKEN_KEY = 'seckill.token';
  // How often one call is tried while the shop says to wait (429, 503 BUSY).
  var MAX_TRIES = 8;

  // Every error code of the API, as a buyer would want it said.
  var MESSAGES = {
    INVALID_INPUT: 'The shop did not understand that request. Reload the page and try again.',
    PAYLOAD_TOO_LARGE: 'That request was too large for the shop.',
    HEADERS_TOO_LARGE: 'That request was too large for the shop.',
    URI_TOO_LONG: 'That address is too long for the shop.',
    REQUEST_TIMEOUT: 'The connection was too slow to send that request. Try again.',
    UNAUTHORIZED: 'Please sign in again: your sign-in is missing or has expired.',
    FORBIDDEN: 'Your account may not do that.',
    NOT_FOUND: 'The shop could not find that.',
    METHOD_NOT_ALLOWED: 'That action is not available here.',
    GOODS_NOT_FOUND: 'This sale does not exist.',
    ORDER_NOT_FOUND: 'That order could not be found.',
    NOT_STARTED: 'The sale has not started yet: the button comes alive when it opens.',
    ENDED: 'The sale has ended.',
    SOLD_OUT: 'Sold out: every unit has been taken.',
    REPEATED: 'You already have one: it is one per buyer.',
    BAD_TOKEN: 'Try again: your place in line ran out. Press Buy again.',
    RATE_LIMITED: 'Too many clicks at once.',
    OUT_OF_STOCK: 'Sold out: every unit has been taken.',
    KEY_RELEASED: 'Try again: that purchase was given back.',
    ORDER_NOT_PAYABLE: 'This order can no longer be paid: it was cancelled, or its time to pay ran out.',
    ORDER_NOT_CANCELLABLE: 'This order can no longer be cancelled.',
    BUSY: 'The shop is very busy.',
    UNAVAILABLE: 'Try again: the shop is having trouble right now.',
    UPSTREAM_UNAVAILABLE: 'Try again: the shop is having trouble right now.',
    UPSTREAM_TIMEOUT: 'Try again: the shop took too long to answer.',
    INTERNAL: 'Try again: something went wrong on our side.',
    NO_WAITING_ROOM: 'This sale has no waiting room: press Buy when it opens.',
    NOT_ADMITTED: 'Wait for your turn in the waiting room, then press Buy.',
    CHALLENGE_REQUIRED: 'Try again: the check that you are not a robot did not go through.'
  };

  function $(id) { return document.getElementById(id); }
  function sleep(ms) { return new Promise(function (resolve) { setTimeout(resolve, ms); }); }

  function sentence(r) {
    if (r.status === 0) return 'Try again: the shop cannot be reached. Check your connection.';
    return MESSAGES[r.code] || 'Try again: the shop answered ' + r.status + '.';
  }

  // A JWT's claims, for showing who is signed in: the gateway checks the signature, not us.
  function claims(token) {
    try {
      var part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      return JSON.parse(atob(part + '==='.slice((part.length + 3) % 4)));
    } catch (e) {
      return null;
    }
  }

  function token() {
    var t = null;
    try { t = localStorage.getItem(TOKEN_KEY); } catch (e) { /* storage off: signed out */ }
    var c = t && claims(t);
    if (!c) return null;
    if (typeof c.exp === 'number' && c.exp * 1000 <= Date.now()) {
      forget();
      return null;
    }
    return t;
  }

  function forget() {
    try { localStorage.removeItem(TOKEN_KEY); } catch (e) { /* nothing kept */ }
  }

  // One API call: {status, body, code, retryAfter}; status 0 when the shop was not reached.
  async function call(method, path, options) {
    options = options || {};
    var headers = { accept: 'application/json' };
    var t = options.anonymous ? null : token();
    if (t) headers.authorization = 'Bearer ' + t;
    var extra = options.headers || {};
    Object.keys(extra).forEach(function (k) { headers[k] = extra[k]; });
    var body;
    if (options.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(options.json);
    }
    var res;
    try {
      res = await fetch(path, { method: method, headers: headers, body: body, cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      return { status: 0, body: null, code: null, retryAfter: 1 };
    }
    var data = null;
    try { data = await res.json(); } catch (e) { data = null; }
    var after = parseInt(res.headers.get('retry-after') || '', 10);
    if (res.status === 401 && t) {
      forget();
      showAccount();
    }
    return {
      status: res.status,
      body: data,
      code: data && typeof data.code === 'string' ? data.code : null,
      retryAfter: after > 0 ? after : 1
    };
  }

  // The shop asks to wait: a 429, or 503 BUSY (a replica shedding load, or the queue not
  // taking the order).
  function asksToWait(r) {
    return r.status === 429 || (r.status === 503 && r.code === 'BUSY');
  }

  // Waits out the answer's Retry-After, telling the buyer so.
  async function waitAsTold(r, tell) {
    for (var left = r.retryAfter; left > 0; left--) {
      tell(sentence(r) + ' Trying again in ' + left + ' s…');
      await sleep(1000);
    }
    // A little spread, so the buyers told to wait together do not all come back together.
    await sleep(Math.random() * 300);
  }

  // A call tried again while the shop asks to wait, at most MAX_TRIES times.
  async function patient(method, path, options, tell) {
    for (var attempt = 1; ; attempt++) {
      var r = await call(method, path, options);
      if (!asksToWait(r) || attempt >= MAX_TRIES) return r;
      await waitAsTold(r, tell);
    }
  }

  // Sign in and out (the header of every page).
  function showAccount() {
    var form = $('signin');
    if (!form) return;
    var t = token();
    form.hidden = !!t;
    $('signed-in').hidden = !t;
    if (t) $('who').textContent = 'Signed in as user ' + (claims(t).sub || '?');
  }

  function setUpAccount() {
    var form = $('signin');
    if (!form) return;
    var error = $('signin-error');
    form.addEventListener('submit', async function (e) {
      e.preventDefault();
      error.textContent = '';
      var t;
      if (document.body.dataset.devTokens === 'true') {
        var user = Number($('signin-user').value);
        var r = await call('POST', '/api/auth/dev-token', { anonymous: true, json: { user_id: user } });
        if (r.status !== 200 || !r.body || !r.body.token) {
          error.textContent = r.code === 'INVALID_INPUT' ? 'A user id is a whole number from 1.' : sentence(r);
          return;
        }
        t = r.body.token;
      } else {
        t = $('signin-token').value.trim();
        if (!claims(t)) {
          error.textContent = 'That is not a token: paste the whole JWT you were given.';
          return;
        }
      }
      try { localStorage.setItem(TOKEN_KEY, t); } catch (err) {
        error.textContent = 'This browser keeps no sign-in (storage is off).';
        return;
      }
      showAccount();
    });
    $('signout').addEventListener('click', function () {
      forget();
      showAccount();
    });
    showAccount();
  }

  function pad(n) { return (n < 10 ? '0' : '') + n; }

  function span(ms) {
    var s = Math.ceil(ms / 1000);
    var d = Math.floor(s / 86400);
    s -= d * 86400;
    return (d ? d + 'd ' : '') + pad(Math.floor(s / 3600)) + ':' + pad(Math.floor(s % 3600 / 60)) + ':' + pad(s % 60);
  }

  // The list: each sale's label follows the clock.
  function listPage() {
    var labels = document.querySelectorAll('.when');
    if (!labels.length) return;
    function tick() {
      var now = Date.now();
      labels.forEach(function (el) {
        var start = Number(el.dataset.startMs), end = Number(el.dataset.endMs);
        el.textContent = now < start ? 'Opens in ' + span(start - now) : now < end ? 'On now' : 'Ended';
      });
    }
    tick();
    setInterval(tick, 1000);
  }

  // A sale's page: the countdown, the button, the buy and its outcome.
  function salePage() {
    var sale = $('sale');
    if (!sale) return;
    var id = sale.dataset.goodsId;
    var start = Number(sale.dataset.startMs), end = Number(sale.dataset.endMs);
    // A sale with a waiting room: Buy joins it (from when it opens), and the buy itself
    // starts on its own when the buyer's place comes up, with the admission it gives.
    var roomOpens = sale.dataset.roomOpensMs ? Number(sale.dataset.roomOpensMs) : null;
    var admission = null;
    var buy = $('buy'), status = $('status'), countdown = $('countdown');
    // The server's clock less the buyer's: the countdown is right whatever the buyer's says.
    var offset = 0;
    // Until the server's clock is known, the buyer's own could open the button too early.
    var synced = false;
    var soldOut = false, busy = false, bought = false, orderId = null;

    function tell(text) { status.textContent = text; }
    function now() { return Date.now() + offset; }

    function tick() {
      var t = now();
      if (t < start) countdown.textContent = 'Opens in ' + span(start - t);
      else if (t >= end) countdown.textContent = 'This sale has ended.';
      else if (soldOut) countdown.textContent = 'Sold out';
      else countdown.textContent = 'On now: closes in ' + span(end - t);
      var opens = roomOpens === null ? start : roomOpens;
      buy.disabled = !synced || busy || bought || soldOut || t < opens || t >= end;
      if (roomOpens !== null && !busy && !bought) buy.textContent = t < start ? 'Join the line' : 'Buy now';
    }

    async function sync() {
      var sent = Date.now();
      var r = await call('GET', '/api/seckill/' + id + '/state', { anonymous: true });
      var back = Date.now();
      if (r.status === 200 && r.body) {
        offset = r.body.now_ms - (sent + back) / 2;
        start = Date.parse(r.body.start_at);
        end = Date.parse(r.body.end_at);
        if (r.body.sold_out && !bought) {
          soldOut = true;
          tell(MESSAGES.SOLD_OUT);
        }
      }
      // No answer: the buyer's clock it is; the buy itself still says if it is too early.
      synced = true;
      tick();
    }

    function settle(r) {
      if (r.code === 'SOLD_OUT' || r.code === 'OUT_OF_STOCK') soldOut = true;
      tell(sentence(r) + (asksToWait(r) ? ' Press Buy to try again in a moment.' : ''));
    }

    function won(order) {
      bought = true;
      orderId = order;
      tell('You got it: order ' + order);
      $('order-id').textContent = order;
      $('order').hidden = false;
      $('pay').hidden = false;
      $('pay').disabled = false;
    }

    // What the shop tells this buyer of this sale as it happens: a stream of server-sent events,
    // read with fetch so the token travels in its header (never in a URL). `onEvent` gets each
    // event and says when it was the last word. A dropped stream is opened again with the last
    // event's id. {done} when the last word came; {refused} when the browser cannot read a
    // stream or the shop will not open one (then the caller polls).
    function canStream() {
      return !!(window.ReadableStream && window.TextDecoder && window.Response && 'body' in Response.prototype);
    }

    async function stream(extra, onEvent) {
      if (!canStream()) return { refused: true };
      var last = null;
      var giveUp = Date.now() + 120000;
      for (var attempt = 1; attempt <= 5 && Date.now() < giveUp; attempt++) {
        var outcome = await listen(last, extra, onEvent);
        if (outcome.done || outcome.refused) return outcome;
        last = outcome.last;
        // Dropped (the shop restarted, the network blinked): back with the last event's id.
        await sleep(1000 + Math.random() * 1000);
      }
      return { refused: true };
    }

    // One stream, until its last word ({done}), a refusal ({refused}) or a drop ({last}).
    async function listen(last, extra, onEvent) {
      var headers = Object.assign({ accept: 'text/event-stream', authorization: 'Bearer ' + token() }, extra);
      if (last) headers['last-event-id'] = last;
      var res;
      try {
        res = await fetch('/api/seckill/' + id + '/events', { headers: headers, cache: 'no-store', credentials: 'omit' });
      } catch (e) {
        return { last: last };
      }
      if (res.status === 204) return { done: true };
      if (res.status !== 200 || !res.body) return { refused: true };
      var reader = res.body.getReader(), decoder = new TextDecoder(), buffer = '', event = {};
      for (;;) {
        var chunk;
        try { chunk = await reader.read(); } catch (e) { return { last: last }; }
        if (chunk.done) return { last: last };
        buffer += decoder.decode(chunk.value, { stream: true });
        var lines = buffer.split('\n');
        buffer = lines.pop();
        for (var i = 0; i < lines.length; i++) {
          var line = lines[i].replace(/\r$/, '');
          if (line === '') {
            if (event.data !== undefined) {
              if (event.id) last = event.id;
              var data = null;
              try { data = JSON.parse(event.data); } catch (e) { data = null; }
              if (data && onEvent(event.event, data)) { reader.cancel(); return { done: true }; }
            }
            event = {};
          } else if (line[0] !== ':') {
            var at = line.indexOf(':');
            var field = at < 0 ? line : line.slice(0, at), value = at < 0 ? '' : line.slice(at + 1).replace(/^ /, '');
            if (field === 'data') event.data = event.data === undefined ? value : event.data + '\n' + value;
            else if (field === 'event' || field === 'id') event[field] = value;
          }
        }
      }
    }

    // The buy's result, told on the stream; polled where it cannot be.
    async function follow() {
      var held = null;
      var outcome = await stream({}, function (kind, data) {
        var word = told(kind, data, held);
        if (word && word !== true) held = word;
        return word === true;
      });
      if (!outcome.done) return poll();
    }

    // One event: true when it was the final word; else the result's status when it told one.
    function told(kind, data, held) {
      if (kind === 'result') {
        if (data.status === 'success') { won(data.order_id); return true; }
        if (data.status === 'failed') { tell('Try again: your order did not go through, and its unit went back on sale.'); return true; }
        if (data.status === 'none') { tell('Try again: the shop holds no order of yours for this sale.'); return true; }
        tell('You are in the queue…');
        return data.status;
      }
      // Sold out: the end for a buyer holding nothing; one whose order is queued waits for it.
      if (kind === 'sold_out' && held !== 'queued') { soldOut = true; tell(MESSAGES.SOLD_OUT); return true; }
      if (kind === 'replaced') { tell('Your order is followed in another tab of this shop.'); return true; }
      return null;
    }

    async function poll() {
      var delay = 200;
      var giveUp = Date.now() + 120000;
      for (;;) {
        await sleep(delay);
        delay = Math.min(delay * 2, 2000);
        var r = await patient('GET', '/api/seckill/' + id + '/result', {}, tell);
        if (r.status === 200 && r.body) {
          if (r.body.status === 'success') return won(r.body.order_id);
          if (r.body.status === 'failed') return tell('Try again: your order did not go through, and its unit went back on sale.');
          if (r.body.status === 'none') return tell('Try again: the shop holds no order of yours for this sale.');
          tell('You are in the queue…');
        } else if (r.status >= 400 && r.status < 500) {
          return settle(r);
        }
        // A 5xx or no answer: the result is kept, ask again.
        if (Date.now() > giveUp) return tell('Still waiting for the shop: reload this page in a minute to see your result.');
      }
    }

    // The place ticket, kept across reloads: presented again, it keeps the place even if the
    // shop lost track of it.
    function ticketKey() { return 'seckill.room.' + id + '.' + ((claims(token()) || {}).sub || ''); }
    function keptTicket() {
      try { return localStorage.getItem(ticketKey()); } catch (e) { return null; }
    }
    function keepTicket(t) {
      try { localStorage.setItem(ticketKey(), t); } catch (e) { /* kept by the shop alone */ }
    }

    function showPlace(q) {
      $('room').hidden = false;
      $('room-place').textContent = q.place ? '#' + q.place : 'drawn when the sale opens';
      $('room-wait').textContent = q.state === 'waiting' && q.ahead !== null
        ? ' — ' + q.ahead + ' ahead of you' + (q.wait_secs !== null ? ', about ' + span(q.wait_secs * 1000) : '')
        : '';
    }

    // A room that asks for proof of work: a challenge, solved in a Web Worker (the page stays
    // responsive), sent with the join.
    async function joinWithWork() {
      tell('Checking that you are not a robot: a few seconds…');
      var c = await patient('POST', '/api/seckill/' + id + '/queue/challenge', {}, tell);
      if (c.status !== 200 || !c.body) return c;
      var answer = await new Promise(function (resolve) {
        var worker = new Worker(sale.dataset.workJs);
        worker.onmessage = function (e) { worker.terminate(); resolve(e.data.answer); };
        worker.postMessage({ challenge: c.body.challenge, difficulty: c.body.difficulty });
      });
      tell('Joining the line…');
      return patient('POST', '/api/seckill/' + id + '/queue', { json: { challenge: c.body.challenge, answer: answer } }, tell);
    }

    // Where the buyer stands: true or false once the wait is over (admitted or not), else null.
    function standing(q) {
      keepTicket(q.ticket);
      showPlace(q);
      if (q.state === 'admitted') { admission = q.admission; return true; }
      if (q.state === 'sold_out') { soldOut = true; tell(MESSAGES.SOLD_OUT); return false; }
      if (q.state === 'closed') { tell('Your turn has passed: the line moved on.'); return false; }
      tell(q.place ? 'You are in line. Keep this page open: your turn starts the buy by itself.'
        : 'You are in the line. Places are drawn at random when the sale opens: joining early or late is the same.');
      return null;
    }

    // The place as the shop tells it on the stream (with the place ticket), until the wait is
    // over: true or false, or null when it could not be streamed (the page then asks).
    async function streamPlace(ticket) {
      var over = null;
      var outcome = await stream({ 'x-room-ticket': ticket }, function (kind, data) {
        if (kind === 'queue') over = standing(data);
        else if (kind === 'sold_out') { soldOut = true; tell(MESSAGES.SOLD_OUT); over = false; }
        return over !== null;
      });
      return outcome.done ? over : null;
    }

    // The waiting room: joins (or rejoins with the kept ticket), then follows where the buyer
    // stands on the stream, or asks when the answer says to, until the place comes up (true:
    // admitted).
    async function waitInRoom() {
      var ticket = keptTicket();
      tell('Joining the line…');
      var r = await patient('POST', '/api/seckill/' + id + '/queue', { json: ticket ? { ticket: ticket } : {} }, tell);
      if (r.status === 403 && r.code === 'BAD_TOKEN' && ticket) {
        // A ticket of another key or user: join afresh.
        r = await patient('POST', '/api/seckill/' + id + '/queue', { json: {} }, tell);
      }
      if (r.code === 'CHALLENGE_REQUIRED') r = await joinWithWork();
      var streamable = canStream();
      for (;;) {
        if (r.status !== 200 || !r.body) {
          if (r.status >= 400 && r.status < 500) { settle(r); return false; }
          tell('Still in line: the shop did not answer, asking again…');
        } else {
          var q = r.body;
          var over = standing(q);
          if (over === null && streamable) {
            streamable = false;
            over = await streamPlace(q.ticket);
          }
          if (over !== null) return over;
          // The shop says when to ask again (sooner as the turn nears).
          await sleep((q.poll_after_ms || 2000) + Math.random() * 200);
        }
        r = await call('GET', '/api/seckill/' + id + '/queue', { headers: { 'x-room-ticket': keptTicket() || '' } });
      }
    }

    async function purchase() {
      if (!token()) {
        tell('Sign in first, then press Buy.');
        var field = $('signin-user') || $('signin-token');
        if (field) field.focus();
        return;
      }
      busy = true;
      tick();
      try {
        if (roomOpens !== null && !(await waitInRoom())) return;
        var room = admission ? { 'x-room-admission': admission } : {};
        var o;
        // An order answered 503 BUSY may have spent its path token (the queue did not take it
        // and its unit went back): each try asks for the token again, which is the same one
        // while it is unused.
        for (var attempt = 1; ; attempt++) {
          tell('Getting your place in line…');
          var t = await patient('POST', '/api/seckill/' + id + '/token', { headers: room }, tell);
          if (t.status !== 200 || !t.body) return settle(t);
          tell('Placing your order…');
          o = await call('POST', '/api/seckill/' + id + '/orders', {
            headers: Object.assign({ 'x-seckill-token': t.body.token }, room)
          });
          if (!asksToWait(o) || attempt >= MAX_TRIES) break;
          await waitAsTold(o, tell);
        }
        if (o.status === 202) {
          tell('You are in the queue…');
        } else if (o.code === 'REPEATED') {
          tell('You already have one: finding your order…');
        } else {
          return settle(o);
        }
        await follow();
      } finally {
        busy = false;
        tick();
      }
    }

    async function pay() {
      var button = $('pay');
      button.disabled = true;
      var r = await patient('POST', '/api/orders/' + orderId + '/pay', {}, tell);
      if (r.status === 200) {
        button.hidden = true;
        $('paid').hidden = false;
        tell('You got it: order ' + orderId);
        return;
      }
      tell(sentence(r));
      button.disabled = r.code === 'ORDER_NOT_PAYABLE';
    }

    buy.addEventListener('click', purchase);
    $('pay').addEventListener('click', pay);
    document.addEventListener('visibilitychange', function () {
      // Timers sleep with the tab: take the server's clock again when it is back.
      if (!document.hidden) sync();
    });
    tick();
    setInterval(tick, 250);
    sync();
  }

  function start() {
    setUpAccount();
    listPage();
    salePage();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
