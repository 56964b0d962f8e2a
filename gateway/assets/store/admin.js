// The admin page: sign in as an admin, create a sale (with a waiting room if asked), watch a
// sale's figures (every 2 s from its audit), render the storefront's pages now. Plain JS, no
// framework.
(function () {
  'use strict';

  // Apart from the buyer's sign-in, so the two never mix in one browser.
  var TOKEN_KEY = 'seckill.admin.token';
  var AUDIT_EVERY_MS = 2000;

  function $(id) { return document.getElementById(id); }

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
    if (!c || (typeof c.exp === 'number' && c.exp * 1000 <= Date.now())) return null;
    return t;
  }

  function forget() {
    try { localStorage.removeItem(TOKEN_KEY); } catch (e) { /* nothing kept */ }
  }

  async function call(method, path, json) {
    var headers = { accept: 'application/json' };
    var t = token();
    if (t) headers.authorization = 'Bearer ' + t;
    var body;
    if (json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(json);
    }
    var res;
    try {
      res = await fetch(path, { method: method, headers: headers, body: body, cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      return { status: 0, body: null, message: 'the gateway cannot be reached' };
    }
    var data = null;
    try { data = await res.json(); } catch (e) { data = null; }
    if (res.status === 401 && t) {
      forget();
      show('Your sign-in has expired: sign in again.');
    }
    var message = data && data.message ? data.message + (data.code ? ' (' + data.code + ')' : '') : 'answer ' + res.status;
    return { status: res.status, body: data, message: message };
  }

  function show(message) {
    var t = token();
    $('admin-signin-form').hidden = !!t;
    $('admin-signed-in').hidden = !t;
    $('admin-tools').hidden = !t;
    $('admin-message').textContent = message || '';
    if (t) {
      $('admin-who').textContent = claims(t).sub;
      loadSales();
    }
  }

  async function signIn(e) {
    e.preventDefault();
    var t;
    if (document.body.dataset.devTokens === 'true') {
      var r = await call('POST', '/api/auth/dev-token', { user_id: Number($('admin-user').value), role: 'admin' });
      if (r.status !== 200) return show('Cannot sign in: ' + r.message);
      t = r.body.token;
    } else {
      t = $('admin-token').value.trim();
    }
    var c = claims(t);
    if (!c) return show('That is not a token: paste the whole JWT.');
    if (c.role !== 'admin') return show("That token is a buyer's, not an admin's.");
    try { localStorage.setItem(TOKEN_KEY, t); } catch (err) { return show('This browser keeps no sign-in (storage is off).'); }
    show('');
  }

  // datetime-local wants local time without a zone.
  function localInput(date) {
    var shifted = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
    return shifted.toISOString().slice(0, 16);
  }

  function cents(value) { return Math.round(Number(value) * 100); }

  function field(form) {
    return function (name) { return form.elements.namedItem(name).value; };
  }

  // The room as the API takes it: the rate a number a second or the word auto; a number left
  // empty takes the service's default.
  function waitingRoom(f) {
    var rate = f('room_rate').trim().toLowerCase();
    var room = { rate: rate === 'auto' ? 'auto' : Number(rate) };
    ['opens_before_secs', 'admission_secs', 'pow_difficulty'].forEach(function (name) {
      if (f('room_' + name) !== '') room[name] = Number(f('room_' + name));
    });
    return room;
  }

  // Disabled while unticked, so that its fields are neither checked nor sent.
  function toggleRoom() {
    var on = $('room').checked;
    $('room-settings').hidden = !on;
    $('room-settings').disabled = !on;
  }

  function rateText(room) {
    return room.rate === 'auto' ? 'auto rate' : room.rate + ' a second';
  }

  function roomText(room) {
    if (!room) return 'none';
    var text = rateText(room) + ', opens ' + room.opens_before_secs + ' s before the sale, admissions of ' +
      room.admission_secs + ' s';
    return room.pow_difficulty ? text + ', proof of work of ' + room.pow_difficulty + ' bits' : text;
  }

  async function createSale(e) {
    e.preventDefault();
    var f = field(e.target);
    var out = $('created');
    var sale = {
      name: f('name'),
      price_cents: cents(f('price')),
      seckill_price_cents: cents(f('seckill_price')),
      stock_total: Number(f('stock_total')),
      start_at: new Date(f('start_at')).toISOString(),
      end_at: new Date(f('end_at')).toISOString()
    };
    // Optional: left empty, the sale has the service's default (1 bucket).
    if (f('buckets') !== '') sale.buckets = Number(f('buckets'));
    // None unless ticked.
    if ($('room').checked) sale.waiting_room = waitingRoom(f);
    var r = await call('POST', '/api/admin/goods', sale);
    out.textContent = '';
    if (r.status !== 201) {
      out.textContent = 'Not created: ' + r.message;
      return;
    }
    out.append('Created sale ' + r.body.id + ': ');
    var link = document.createElement('a');
    link.href = '/sales/' + r.body.id;
    link.textContent = r.body.name;
    out.append(link);
    await loadSales(r.body.id);
  }

  // The sales listed, by id: their rooms, for the figures.
  var sales = {};

  async function loadSales(choose) {
    var select = $('audit-goods');
    var keep = choose || select.value;
    var r = await call('GET', '/api/goods');
    if (r.status !== 200 || !Array.isArray(r.body)) return;
    select.textContent = '';
    sales = {};
    r.body.forEach(function (g) {
      sales[g.id] = g;
      var option = document.createElement('option');
      option.value = g.id;
      option.textContent = g.id + ': ' + g.name + (g.waiting_room ? ' (waiting room, ' + rateText(g.waiting_room) + ')' : '');
      select.append(option);
    });
    if (keep && select.querySelector('option[value="' + keep + '"]')) select.value = String(keep);
    audit();
  }

  function figure(id, value) { $(id).textContent = value === null || value === undefined ? 'not loaded' : value; }

  var timer = null, auditing = false;
  async function audit() {
    // One audit at a time: the one running schedules the next.
    if (auditing) return;
    auditing = true;
    clearTimeout(timer);
    try {
      await auditOnce();
    } finally {
      auditing = false;
      timer = setTimeout(audit, AUDIT_EVERY_MS);
    }
  }

  async function auditOnce() {
    var id = $('audit-goods').value;
    // From the list, not the audit: a room is set when the sale is made, never after.
    if (sales[id]) $('fig-room').textContent = roomText(sales[id].waiting_room);
    if (id && token() && !document.hidden) {
      var r = await call('GET', '/api/admin/goods/' + id + '/audit');
      var list = $('fig-differences');
      if (r.status === 200) {
        var a = r.body;
        figure('fig-sold', a.authority.active_orders);
        figure('fig-queued', a.queue.waiting);
        figure('fig-redis', a.redis.stock);
        figure('fig-authority', a.authority.stock_available);
        figure('fig-total', a.authority.stock_total);
        figure('fig-agrees', a.agrees ? 'yes' : 'no');
        list.textContent = '';
        a.differences.forEach(function (d) {
          var item = document.createElement('li');
          item.textContent = d;
          list.append(item);
        });
        $('fig-updated').textContent = 'Updated ' + new Date().toLocaleTimeString();
      } else {
        $('fig-updated').textContent = 'No figures: ' + r.message;
      }
    }
  }

  async function renderPages() {
    var r = await call('POST', '/api/admin/storefront/render');
    $('rendered').textContent = r.status === 200 ? r.body.pages + ' pages rendered' : 'Not rendered: ' + r.message;
  }

  function start() {
    var form = $('create-sale').elements;
    var opens = new Date(Date.now() + 5 * 60000);
    opens.setSeconds(0, 0);
    form.namedItem('start_at').value = localInput(opens);
    form.namedItem('end_at').value = localInput(new Date(opens.getTime() + 3600000));
    $('admin-signin-form').addEventListener('submit', signIn);
    $('admin-signout').addEventListener('click', function () {
      forget();
      show('');
    });
    $('create-sale').addEventListener('submit', createSale);
    $('room').addEventListener('change', toggleRoom);
    toggleRoom();
    $('audit-goods').addEventListener('change', audit);
    $('render').addEventListener('click', renderPages);
    document.addEventListener('visibilitychange', audit);
    show('');
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
