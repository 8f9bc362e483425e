// switchboard console. Plain JavaScript, no build step, no external requests.
// The session lives in an HttpOnly cookie; the CSRF token only in this page's memory.
'use strict';

const state = {
  csrf: null,
  me: null,
  view: 'sessions',
  sessions: [],
  session: null,          // selected channel id (string)
  scopeSession: null,
  expanded: new Set(),    // audit row ids shown open
  auditFilter: {},
  hideReads: true,
  clockSkewMs: 0,
  busy: false,
};

const $ = (id) => document.getElementById(id);

// Builds an element; children are nodes or text (never parsed as HTML).
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// Replaces a container's children only when what it shows changed, so a poll never steals
// focus, hover or a half-made click from an unchanged list.
function renderIfChanged(container, signature, build) {
  const sig = JSON.stringify(signature);
  if (container.dataset.sig === sig) return false;
  container.dataset.sig = sig;
  container.replaceChildren(...build());
  return true;
}

function toast(text) {
  const t = $('toast');
  t.textContent = text;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.textContent = ''; }, 5000);
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error && body.error.code;
  }
}

async function api(method, path, body) {
  const headers = { accept: 'application/json' };
  if (method !== 'GET') {
    headers['content-type'] = 'application/json';
    if (state.csrf) headers['x-switchboard-csrf'] = state.csrf;
  }
  const response = await fetch(path, {
    method, headers, credentials: 'same-origin', cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch (_) { data = null; }
  if (response.status === 401 && path !== '/console/api/login') {
    showLogin('Your console session ended; log in again.');
    throw new ApiError(401, data);
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// ---------- login ----------

function showLogin(message) {
  stopLive();
  state.csrf = null;
  $('app').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message || '';
  $('token').focus();
}

async function showApp() {
  state.me = await api('GET', '/console/api/me');
  state.csrf = state.me.csrf;
  $('login').hidden = true;
  $('app').hidden = false;
  $('who').textContent = `as ${state.me.caller}`;
  const compose = state.me.compose;
  $('compose').hidden = !compose;
  if (compose) {
    $('compose-user').replaceChildren(...compose.map((u) => el('option', { value: u.id }, u.name)));
  }
  selectView(location.hash.replace('#', '') || state.view, false);
  await refresh();
  startLive();
}

$('login-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const input = $('token');
  $('login-error').textContent = '';
  try {
    await api('POST', '/console/api/login', { token: input.value });
    input.value = '';
    await showApp();
  } catch (error) {
    input.select();
    $('login-error').textContent = error.status === 401
      ? 'That token is not valid for this server.'
      : `Login refused: ${error.message}`;
  }
});

$('logout').addEventListener('click', async () => {
  try { await api('POST', '/console/api/logout', {}); } catch (_) { /* the session is gone either way */ }
  showLogin('Logged out.');
});

// ---------- views and keyboard ----------

const VIEWS = ['sessions', 'approvals', 'audit', 'scopes', 'runs'];

function selectView(view, focus) {
  if (!VIEWS.includes(view)) view = 'sessions';
  state.view = view;
  for (const name of VIEWS) {
    const tab = $(`tab-${name}`);
    const selected = name === view;
    tab.setAttribute('aria-selected', String(selected));
    tab.tabIndex = selected ? 0 : -1;
    $(`view-${name}`).hidden = !selected;
  }
  if (location.hash !== `#${view}`) history.replaceState(null, '', `#${view}`);
  if (focus) $(`tab-${view}`).focus();
  refresh();
}

document.querySelector('.tabs').addEventListener('click', (event) => {
  const tab = event.target.closest('[role=tab]');
  if (tab) selectView(tab.dataset.view, false);
});

document.querySelector('.tabs').addEventListener('keydown', (event) => {
  const index = VIEWS.indexOf(state.view);
  if (event.key === 'ArrowRight') selectView(VIEWS[(index + 1) % VIEWS.length], true);
  else if (event.key === 'ArrowLeft') selectView(VIEWS[(index + VIEWS.length - 1) % VIEWS.length], true);
  else if (event.key === 'Home') selectView(VIEWS[0], true);
  else if (event.key === 'End') selectView(VIEWS[VIEWS.length - 1], true);
  else return;
  event.preventDefault();
});

document.addEventListener('keydown', (event) => {
  if ($('app').hidden || event.ctrlKey || event.metaKey || event.altKey) return;
  const typing = /^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName);
  if (typing) return;
  const n = Number(event.key);
  if (n >= 1 && n <= VIEWS.length) { selectView(VIEWS[n - 1], true); event.preventDefault(); }
});

// ---------- rendering helpers ----------

// Mentions and channel tokens as chips: `@name`, `#token`.
function chips(text) {
  const parts = String(text || '').split(/(@[\w.-]+|#[\w-]+)/g);
  return parts.map((part, i) => (i % 2 === 1 ? el('span', { class: 'chip' }, part) : part));
}

function sessionLabel(s) {
  if (!s) return '';
  if (s.token) return `#${s.token}`;
  if (s.kind === 'dm') return `DM ${s.title || ''}`.trim();
  return s.title ? `#${s.title}` : s.channelId;
}

function sessionName(id) {
  const s = state.sessions.find((x) => x.channelId === String(id));
  return s ? sessionLabel(s) : String(id);
}

function time(ms) {
  if (!ms) return '';
  return new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

// ---------- sessions and messages ----------

async function loadSessions() {
  const data = await api('GET', '/console/api/sessions');
  state.sessions = data.sessions || [];
  if (!state.session && state.sessions.length) state.session = state.sessions[0].channelId;
  if (!state.scopeSession && state.sessions.length) state.scopeSession = state.sessions[0].channelId;
  const list = $('session-list');
  const focused = document.activeElement && document.activeElement.dataset.session;
  renderIfChanged(list, [state.sessions, state.session], () => state.sessions.map((s) => el('li', {},
    el('button', {
      type: 'button', 'data-session': s.channelId,
      'aria-current': s.channelId === state.session ? 'true' : null,
      onclick: () => { state.session = s.channelId; refresh(); },
    }, sessionLabel(s), el('span', { class: 'kind' }, s.kind || '')))));
  if (focused && document.activeElement === document.body) { const again = list.querySelector(`[data-session="${focused}"]`); if (again) again.focus(); }
  const select = $('scope-session');
  const keep = state.scopeSession;
  renderIfChanged(select, [state.sessions, keep], () => state.sessions.map((s) => el('option', { value: s.channelId, selected: s.channelId === keep }, sessionLabel(s))));
}

async function loadMessages() {
  if (!state.session) return;
  const current = state.sessions.find((s) => s.channelId === state.session);
  $('session-title').textContent = current ? sessionLabel(current) : state.session;
  const data = await api('GET', `/console/api/sessions/${encodeURIComponent(state.session)}/messages?limit=50`);
  const list = $('messages');
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  const bot = state.me && state.me.botUserId;
  renderIfChanged(list, [state.session, bot, data.messages], () => (data.messages || []).map((m) => el('li', {
    class: `message${String(m.authorId) === String(bot) ? ' bot' : ''}`, 'data-message': m.messageId,
  },
  el('div', { class: 'meta' }, el('span', { class: 'author' }, m.authorName || m.authorId), m.ts ? new Date(m.ts).toLocaleTimeString() : ''),
  el('div', { class: 'text' }, chips(m.text)))));
  if (atBottom) list.scrollTop = list.scrollHeight;
}

$('compose').addEventListener('submit', async (event) => {
  event.preventDefault();
  const text = $('compose-text');
  if (!text.value.trim() || !state.session) return;
  try {
    await api('POST', '/console/api/compose', {
      sessionId: state.session, authorId: $('compose-user').value, content: text.value,
    });
    text.value = '';
    refresh();
  } catch (error) { toast(`Not posted: ${error.message}`); }
});

// ---------- approvals ----------

function renderApprovals(data) {
  const pending = data.approvals || [];
  state.clockSkewMs = (data.nowMs || Date.now()) - Date.now();
  const badge = $('approvals-count');
  badge.hidden = pending.length === 0;
  badge.textContent = String(pending.length);
  if (state.view !== 'approvals') return;
  $('approvals-note').textContent = data.consoleApproves
    ? (pending.length ? '' : 'Nothing is waiting for approval.')
    : 'Approvals are decided in Discord only (permissions.console_approves = false).';
  const secondsLeft = (card) => `${Math.max(0, Math.round((card.expiresAtMs - (Date.now() + state.clockSkewMs)) / 1000))}s left`;
  renderIfChanged($('approvals'), [pending.map((c) => c.id), data.consoleApproves], () => pending.map((card) => {
    const decide = (approve) => async () => {
      try {
        await api('POST', `/console/api/approvals/${encodeURIComponent(card.id)}`, { approve });
        toast(`${approve ? 'Approved' : 'Denied'}: ${card.tool}`);
      } catch (error) { toast(`Not decided: ${error.message}`); }
      refresh();
    };
    return el('li', { class: 'approval', 'data-approval-card': card.id },
      el('div', {}, el('strong', {}, card.tool), ' in ', el('strong', {}, card.sessionLabel)),
      el('div', { class: 'muted small' }, `Asked by ${card.requestedBy} · binding ${card.binding} · `,
        el('span', { 'data-left': card.id }, secondsLeft(card))),
      el('pre', {}, card.preview),
      el('div', { class: 'actions' },
        el('button', { type: 'button', class: 'approve', 'data-approval': card.id, disabled: !data.consoleApproves, onclick: decide(true) }, 'Approve'),
        el('button', { type: 'button', class: 'deny', 'data-approval': card.id, disabled: !data.consoleApproves, onclick: decide(false) }, 'Deny')));
  }));
  for (const card of pending) {
    const left = document.querySelector(`[data-left="${card.id}"]`);
    if (left) left.textContent = secondsLeft(card);
  }
}

// ---------- audit ----------

const CONSOLE_READS = new Set(['audit.list', 'surface.sessions.list', 'surface.messages.list']);

$('audit-filters').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  state.auditFilter = {};
  for (const key of ['tool', 'sessionId', 'caller', 'decision', 'since']) {
    const value = String(form.get(key) || '').trim();
    if (value) state.auditFilter[key] = value;
  }
  state.hideReads = form.get('hideReads') === 'on';
  refresh();
});

async function loadAudit() {
  const query = new URLSearchParams({ ...state.auditFilter, limit: '200' });
  let data;
  try {
    data = await api('GET', `/console/api/audit?${query}`);
    $('audit-error').textContent = '';
  } catch (error) {
    $('audit-error').textContent = error.message;
    return;
  }
  const me = state.me && state.me.caller;
  const rows = (data.audit || []).filter((r) => !(state.hideReads && r.caller === me && CONSOLE_READS.has(r.tool)));
  const body = $('audit-rows');
  const focusedId = document.activeElement && document.activeElement.dataset.audit;
  const sig = [rows.slice(0, 100).map((r) => r.id), [...state.expanded]];
  if (body.dataset.sig === JSON.stringify(sig)) return;
  body.dataset.sig = JSON.stringify(sig);
  const out = [];
  for (const r of rows.slice(0, 100)) {
    const open = state.expanded.has(r.id);
    const ok = r.outcome === 'ok';
    out.push(el('tr', { class: 'row', 'data-row': r.id },
      el('td', { class: 'mono' }, time(r.timeMs)),
      el('td', {}, r.caller),
      el('td', {}, el('button', {
        type: 'button', 'aria-expanded': String(open), 'data-audit': r.id,
        onclick: () => { if (open) state.expanded.delete(r.id); else state.expanded.add(r.id); refresh(); },
      }, r.tool)),
      el('td', {}, ((r.sessionLabels && r.sessionLabels.length) ? r.sessionLabels : (r.sessions || []).map(sessionName)).join(', ')),
      el('td', { class: `d-${r.decision}` }, r.decision, r.decidedBy ? el('div', { class: 'muted small' }, r.decidedBy) : null),
      el('td', { class: ok ? 'o-ok' : 'o-bad' }, r.outcome, r.code ? el('div', { class: 'small' }, r.code) : null),
      el('td', { class: 'mono' }, r.durationMs)));
    if (open) {
      const detail = { input: r.input, run: r.run, requestedBy: r.requestedBy, decidedBy: r.decidedBy, code: r.code, time: new Date(r.timeMs).toISOString() };
      out.push(el('tr', { class: 'detail' }, el('td', { colspan: '7' }, el('pre', {}, JSON.stringify(detail, null, 2)))));
    }
  }
  if (!out.length) out.push(el('tr', {}, el('td', { colspan: '7', class: 'muted' }, 'No rows match.')));
  body.replaceChildren(...out);
  if (focusedId) { const again = body.querySelector(`[data-audit="${focusedId}"]`); if (again) again.focus(); }
}

// ---------- scopes ----------

$('scope-session').addEventListener('change', (event) => { state.scopeSession = event.target.value; refresh(); });

async function loadScope() {
  if (!state.scopeSession) return;
  const data = await api('GET', `/console/api/sessions/${encodeURIComponent(state.scopeSession)}/scope`);
  const rules = data.rules || [];
  renderIfChanged($('scope-detail'), data, () => [
    el('div', {}, el('strong', {}, 'Effective scope '), el('span', { class: 'muted small', id: 'scope-source' },
      data.overridden ? '(changed with /tools or the console)' : (data.sessionScope ? '(from the config)' : '(the agent\'s scope; no session limit)'))),
    el('div', { class: 'tool-chips', id: 'scope-effective' },
      data.effective.length ? data.effective.map((t) => el('span', { class: 'chip' }, t)) : el('span', { class: 'muted' }, 'nothing: runs here may call no tool')),
    el('div', {}, el('strong', {}, 'Rules that can apply here'), ` (last match wins; default ${data.defaultPolicy})`),
    rules.length
      ? el('div', { class: 'table-wrap' }, el('table', {}, el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Rule'), el('th', { scope: 'col' }, 'Tool'), el('th', { scope: 'col' }, 'Policy'))),
        el('tbody', {}, rules.map((r) => el('tr', {}, el('td', {}, r.name), el('td', {}, r.tool), el('td', { class: `d-${r.policy}` }, r.policy))))))
      : el('div', { class: 'muted' }, 'No rule names this session.')]);
}

$('scope-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  const action = String(form.get('action'));
  const tools = String(form.get('tools') || '').trim();
  try {
    await api('POST', `/console/api/sessions/${encodeURIComponent(state.scopeSession)}/scope`, { action, tools: tools || null });
    $('scope-error').textContent = '';
    toast(`Scope of ${sessionName(state.scopeSession)} changed`);
  } catch (error) { $('scope-error').textContent = error.message; }
  refresh();
});

// ---------- runs and health ----------

function renderHealth(h) {
  const pill = $('health');
  pill.textContent = `gateway: ${h.gateway}`;
  pill.className = `pill ${h.gateway}`;
  if (state.me) state.me.botUserId = h.botUserId;
  if (state.view !== 'runs') return;
  const facts = [['Gateway', h.gateway], ['Version', h.version], ['Pending approvals', h.pendingApprovals], ['Console logins', h.consoleSessions], ['Updates', liveMode()]];
  $('health-detail').replaceChildren(...facts.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))]));
}

async function loadRuns() {
  const data = await api('GET', '/console/api/runs');
  const trigger = (t) => (t ? `${t.author}: ${t.text}` : '—');
  const active = data.active || [];
  renderIfChanged($('runs-active'), [active, data.agent], () => (active.length ? active.map((r) => el('tr', {},
    el('td', {}, r.session || r.sessionId), el('td', {}, trigger(r.running)), el('td', {}, String((r.waiting || []).length)),
    el('td', {}, r.running ? el('button', { type: 'button', class: 'deny', onclick: async () => {
      try { const a = await api('POST', `/console/api/runs/${r.sessionId}/abort`, {}); toast(`Abort: ${a.outcome}`); } catch (e) { toast(e.message); }
      refresh();
    } }, 'Abort') : null)))
    : [el('tr', {}, el('td', { colspan: '4', class: 'muted' }, data.agent ? 'No run in progress.' : 'No agent is configured.'))]));
  const recent = data.recent || [];
  renderIfChanged($('runs-recent'), [recent, state.sessions.length], () => (recent.length ? recent.map((r) => el('tr', {},
    el('td', { class: 'mono' }, r.run), el('td', {}, ((r.sessionLabels && r.sessionLabels.length) ? r.sessionLabels : (r.sessions || []).map(sessionName)).join(', ')),
    el('td', {}, time(r.firstMs)), el('td', {}, `${((r.lastMs - r.firstMs) / 1000).toFixed(1)} s`),
    el('td', {}, String(r.calls)), el('td', { class: r.failed ? 'o-bad' : 'o-ok' }, String(r.failed))))
    : [el('tr', {}, el('td', { colspan: '6', class: 'muted' }, 'No recent run in the audit log.'))]));
}

// ---------- live updates ----------
// One refresh reads what the visible view shows. It runs on every server event when the
// event stream answers, else on a timer.

async function refresh() {
  if (state.busy || !state.csrf) { state.again = Boolean(state.csrf); return; }
  state.busy = true;
  try {
    const [health, approvals] = await Promise.all([
      api('GET', '/console/api/health'), api('GET', '/console/api/approvals'),
    ]);
    renderHealth(health);
    renderApprovals(approvals);
    if (state.view === 'sessions') { await loadSessions(); await loadMessages(); }
    else if (state.view === 'audit') { if (!state.sessions.length) await loadSessions(); await loadAudit(); }
    else if (state.view === 'scopes') { await loadSessions(); await loadScope(); }
    else if (state.view === 'runs') { if (!state.sessions.length) await loadSessions(); await loadRuns(); }
  } catch (error) {
    if (error.status !== 401) toast(error.message);
  } finally {
    state.busy = false;
    if (state.again) { state.again = false; setTimeout(refresh, 0); }
  }
}

const live = { source: null, timer: null, mode: 'off' };
const POLL_MS = 1500;
// Where a server event stream may answer (the console's own first, then the API's).
const EVENT_STREAMS = ['/console/api/events', '/v1/events'];

function liveMode() { return live.mode; }

// The one switch between event stream and polling.
async function startLive() {
  stopLive();
  for (const url of EVENT_STREAMS) {
    if (await answersEvents(url)) {
      const source = new EventSource(url, { withCredentials: true });
      source.onmessage = () => refresh();
      source.onerror = () => { source.close(); live.source = null; startPolling(); };
      live.source = source;
      live.mode = `events (${url})`;
      // A slow poll as well, for named events and anything the stream leaves out.
      live.timer = setInterval(refresh, 10000);
      $('live-mode').textContent = 'live';
      return;
    }
  }
  startPolling();
}

async function answersEvents(url) {
  const controller = new AbortController();
  try {
    const response = await fetch(url, { credentials: 'same-origin', headers: { accept: 'text/event-stream' }, signal: controller.signal });
    const ok = response.status === 200 && (response.headers.get('content-type') || '').startsWith('text/event-stream');
    controller.abort();
    return ok;
  } catch (_) {
    return false;
  }
}

function startPolling() {
  if (live.timer) clearInterval(live.timer);
  live.timer = setInterval(refresh, POLL_MS);
  live.mode = `polling every ${POLL_MS / 1000} s`;
  $('live-mode').textContent = 'polling';
}

function stopLive() {
  if (live.source) live.source.close();
  if (live.timer) clearInterval(live.timer);
  live.source = null; live.timer = null; live.mode = 'off';
}

// ---------- start ----------

showApp().catch((error) => showLogin(error.status === 401 ? '' : error.message));
