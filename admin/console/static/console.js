// txkit console: auto-refresh, and the Requeue / Redeliver buttons (confirm, then POST to the
// admin API with the operator's bearer token, asked once and kept in this tab's sessionStorage).
// Text from the server is only ever set with textContent, never as markup.
(function () {
  'use strict';
  var TOKEN = 'txkit-console-token';
  var PAUSED = 'txkit-console-refresh-off';
  var busy = false;
  var flash = document.getElementById('flash');
  var forget = document.getElementById('forget-token');

  function say(state, text) {
    flash.hidden = false;
    flash.dataset.state = state;
    flash.textContent = text;
  }

  function showForget() { if (forget) forget.hidden = !sessionStorage.getItem(TOKEN); }
  if (forget) {
    forget.addEventListener('click', function () { sessionStorage.removeItem(TOKEN); showForget(); say('ok', 'Token forgotten.'); });
  }
  showForget();

  // Auto-refresh: reload every data-refresh seconds unless switched off or an action is under way.
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
      if (!busy && (!box || box.checked)) { location.reload(); }
    }, secs * 1000);
  }

  function token() {
    var t = sessionStorage.getItem(TOKEN);
    if (t) { return t; }
    t = window.prompt('Admin token (kept in this browser tab only):');
    if (!t || !t.trim()) { return null; }
    t = t.trim();
    sessionStorage.setItem(TOKEN, t);
    showForget();
    return t;
  }

  function newKey() {
    if (window.crypto && crypto.randomUUID) { return crypto.randomUUID(); }
    return String(Date.now()) + '-' + Math.random().toString(16).slice(2);
  }

  document.addEventListener('click', function (ev) {
    var btn = ev.target.closest ? ev.target.closest('button[data-action]') : null;
    if (!btn || btn.disabled) { return; }
    ev.preventDefault();
    if (!window.confirm(btn.dataset.confirm)) { return; }
    var t = token();
    if (!t) { say('error', 'No token given: nothing was done.'); return; }
    var row = document.getElementById(btn.dataset.row);
    var done = btn.dataset.action === 'requeue' ? 'requeued' : 'redelivered';
    busy = true;
    btn.disabled = true;
    say('busy', btn.dataset.action + ' ' + btn.dataset.id + '…');
    fetch(btn.dataset.url, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Authorization': 'Bearer ' + t, 'Idempotency-Key': newKey(), 'Accept': 'application/json' }
    }).then(function (res) {
      return res.json().catch(function () { return {}; }).then(function (body) { return { res: res, body: body }; });
    }).then(function (r) {
      if (r.res.ok) {
        if (row) { row.dataset.state = done; }
        btn.textContent = done;
        say('ok', (btn.dataset.kind || 'Item') + ' ' + btn.dataset.id + ' ' + done + '.');
        busy = false;
        setTimeout(function () { location.reload(); }, 1500);
        return;
      }
      if (r.res.status === 401) { sessionStorage.removeItem(TOKEN); showForget(); }
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
