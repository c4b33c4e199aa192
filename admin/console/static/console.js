// txkit console: auto-refresh, the sign-in form, and the Requeue / Redeliver / Reveal buttons
// (confirm, then POST to the admin API with the operator's bearer token). The token is asked for
// once: the sign-in form keeps it in this tab's sessionStorage for the buttons (the server keeps
// a session cookie for the pages), and a button asks only if the tab has none. Text from the
// server is only ever set with textContent, never as markup.
(function () {
  'use strict';
  var TOKEN = 'txkit-console-token';
  var PAUSED = 'txkit-console-refresh-off';
  var busy = false;
  var revealed = false; // the page shows revealed values: it no longer reloads itself
  var flash = document.getElementById('flash');

  function say(state, text) {
    flash.hidden = false;
    flash.dataset.state = state;
    flash.textContent = text;
  }

  // Sign in: the tab keeps the token for the buttons; sign out forgets it.
  var login = document.getElementById('login');
  if (login) {
    login.addEventListener('submit', function () {
      var t = login.elements.token.value.trim();
      if (t) { sessionStorage.setItem(TOKEN, t); }
    });
  }
  var signOut = document.getElementById('sign-out');
  if (signOut) {
    signOut.addEventListener('submit', function () { sessionStorage.removeItem(TOKEN); });
  }

  // Auto-refresh: reload every data-refresh seconds unless switched off, an action is under way or
  // values were revealed.
  var secs = parseInt(document.body.dataset.refresh || '0', 10);
  var box = document.getElementById('autorefresh');
  if (box) {
    box.checked = sessionStorage.getItem(PAUSED) !== '1';
    box.addEventListener('change', function () {
      if (box.checked) { sessionStorage.removeItem(PAUSED); } else { sessionStorage.setItem(PAUSED, '1'); }
    });
  }
  if (secs > 0) {
    setInterval(function () {
      if (!busy && !revealed && (!box || box.checked)) { location.reload(); }
    }, secs * 1000);
  }

  function token() {
    var t = sessionStorage.getItem(TOKEN);
    if (t) { return t; }
    t = window.prompt('Admin token (kept in this browser tab only):');
    if (!t || !t.trim()) { return null; }
    t = t.trim();
    sessionStorage.setItem(TOKEN, t);
    return t;
  }

  function newKey() {
    if (window.crypto && crypto.randomUUID) { return crypto.randomUUID(); }
    return String(Date.now()) + '-' + Math.random().toString(16).slice(2);
  }

  // text decodes a revealed value (base64 in the JSON) as UTF-8.
  function text(b64) {
    var bin = atob(b64 || '');
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) { bytes[i] = bin.charCodeAt(i); }
    return new TextDecoder().decode(bytes);
  }

  // show fills the [data-secret] elements inside the button's scope with the answer's values:
  // data-secret names the field (payload, body, headers, branches), data-key the header or branch.
  function show(btn, body) {
    var scope = document.getElementById(btn.dataset.scope) || document;
    scope.querySelectorAll('[data-secret]').forEach(function (el) {
      var v = body[el.dataset.secret];
      if (v && el.dataset.key !== undefined) { v = v[el.dataset.key]; }
      if (v && el.dataset.secret === 'branches') { v = v.payload; }
      if (v && v.value !== undefined) {
        el.textContent = text(v.value);
        el.dataset.revealed = 'true';
      }
    });
  }

  document.addEventListener('click', function (ev) {
    var btn = ev.target.closest ? ev.target.closest('button[data-action]') : null;
    if (!btn || btn.disabled) { return; }
    ev.preventDefault();
    if (!window.confirm(btn.dataset.confirm)) { return; }
    var t = token();
    if (!t) { say('error', 'No token given: nothing was done.'); return; }
    var action = btn.dataset.action;
    var row = document.getElementById(btn.dataset.row);
    var done = { requeue: 'requeued', redeliver: 'redelivered', reveal: 'revealed', resume: 'resumed' }[action];
    busy = true;
    btn.disabled = true;
    say('busy', action + ' ' + btn.dataset.id + '…');
    var headers = { 'Authorization': 'Bearer ' + t, 'Accept': 'application/json' };
    if (action !== 'reveal') { headers['Idempotency-Key'] = newKey(); }
    fetch(btn.dataset.url, { method: 'POST', credentials: 'same-origin', headers: headers }).then(function (res) {
      return res.json().catch(function () { return {}; }).then(function (body) { return { res: res, body: body }; });
    }).then(function (r) {
      if (r.res.ok) {
        if (action === 'reveal') {
          revealed = true;
          show(btn, r.body);
          btn.textContent = done;
          say('ok', (btn.dataset.kind || 'Item') + ' ' + btn.dataset.id + ' revealed (recorded in the audit).');
          busy = false;
          return;
        }
        if (row) { row.dataset.state = done; }
        btn.textContent = done;
        say('ok', (btn.dataset.kind || 'Item') + ' ' + btn.dataset.id + ' ' + done + '.');
        busy = false;
        setTimeout(function () { location.reload(); }, 1500);
        return;
      }
      if (r.res.status === 401) { sessionStorage.removeItem(TOKEN); }
      say('error', (r.body && r.body.error) || (r.res.status + ' ' + r.res.statusText));
      btn.disabled = false;
      busy = false;
    }).catch(function (err) {
      say('error', 'request failed: ' + err);
      btn.disabled = false;
      busy = false;
    });
  });
})();
