// switchboard console. Plain JavaScript, no build step, no external requests.
// The login lives in an HttpOnly cookie; the CSRF token only in this page's memory.
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
    showLogin('Your console login ended; log in again.');
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

// ---------- Discord's Markdown, as DOM nodes (never HTML from message text) ----------
// Code blocks, inline code, bold, italic, underline, strikethrough, spoilers, quotes,
// headings, links (http and https only) and <t:SECONDS:STYLE> timestamps in the viewer's own
// time zone. Everything else stays text; nesting is bounded.

const MAX_NESTING = 6;

// `<t:SECONDS:STYLE>` as Discord's client shows it, in this browser's time zone.
function timestamp(seconds, style) {
  const ms = Number(seconds) * 1000;
  const date = new Date(ms);
  if (!Number.isFinite(ms) || Number.isNaN(date.getTime())) return null;
  const formats = {
    t: { hour: '2-digit', minute: '2-digit' },
    T: { hour: '2-digit', minute: '2-digit', second: '2-digit' },
    d: { year: 'numeric', month: '2-digit', day: '2-digit' },
    D: { year: 'numeric', month: 'long', day: 'numeric' },
    f: { dateStyle: 'long', timeStyle: 'short' },
    F: { dateStyle: 'full', timeStyle: 'short' },
  };
  let shown;
  if (style === 'R') {
    const seconds = Math.round((ms - Date.now()) / 1000);
    const units = [['year', 31536000], ['month', 2592000], ['day', 86400], ['hour', 3600], ['minute', 60], ['second', 1]];
    const [unit, size] = units.find(([, size]) => Math.abs(seconds) >= size) || units[units.length - 1];
    shown = new Intl.RelativeTimeFormat([], { numeric: 'auto' }).format(Math.round(seconds / size), unit);
  } else {
    const options = formats[style || 'f'];
    shown = options.dateStyle ? new Intl.DateTimeFormat([], options).format(date)
      : (options.hour ? date.toLocaleTimeString([], options) : date.toLocaleDateString([], options));
  }
  return el('time', { datetime: date.toISOString(), title: new Intl.DateTimeFormat([], { dateStyle: 'full', timeStyle: 'long' }).format(date), class: 'ts' }, shown);
}

function safeLink(url, label) {
  let parsed;
  try { parsed = new URL(url); } catch (_) { return null; }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return null;
  return el('a', { href: parsed.href, target: '_blank', rel: 'noopener noreferrer nofollow' }, label === undefined ? url : label);
}

// Delimited spans: the marker, the element it makes, and whether it needs word boundaries.
const SPANS = [
  ['***', (inner) => el('strong', {}, el('em', {}, inner))],
  ['**', (inner) => el('strong', {}, inner)],
  ['__', (inner) => el('u', {}, inner)],
  ['~~', (inner) => el('s', {}, inner)],
  ['||', (inner) => el('span', { class: 'spoiler', title: 'spoiler' }, inner)],
  ['*', (inner) => el('em', {}, inner)],
  ['_', (inner) => el('em', {}, inner), true],
];

const WORD = /[\p{L}\p{N}]/u;
// Sticky patterns, tried where the scan stands (`lastIndex`), never over the whole text.
const ESCAPED = /\\([\\*_`~|<>[\]()#-])/y;
const TICKS = /`+/y;
const TIMESTAMP = /<t:(-?\d{1,13})(?::([tTdDfFR]))?>/y;
const ANGLED_LINK = /<(https?:\/\/[^\s<>]+)>/y;
const MASKED_LINK = /\[([^[\]\n]{1,256})\]\((https?:\/\/[^\s()<>]+)\)/y;
const BARE_LINK = /https?:\/\/[^\s<>]*[^\s<>.,:;"')\]!?*_~|]/y;

function at(pattern, text, i) {
  pattern.lastIndex = i;
  return pattern.exec(text);
}

// The end of the span `marker` opens at `i`, or -1: its content neither starts nor ends
// with a space, and `_` only opens and closes at word boundaries (snake_case stays text).
function spanEnd(text, i, marker, wordBound) {
  const start = i + marker.length;
  if (start >= text.length || /\s/.test(text[start])) return -1;
  if (wordBound && i > 0 && WORD.test(text[i - 1])) return -1;
  let end = text.indexOf(marker, start + 1);
  while (end !== -1 && (/\s/.test(text[end - 1])
    || (wordBound && end + marker.length < text.length && WORD.test(text[end + marker.length])))) {
    end = text.indexOf(marker, end + 1);
  }
  return end;
}

// Inline Markdown of `text` as nodes; plain runs become text with mention chips.
function inline(text, depth) {
  const out = [];
  let plain = '';
  const flush = () => { if (plain) { out.push(...chips(plain)); plain = ''; } };
  const put = (node, next) => { flush(); out.push(node); return next; };
  let i = 0;
  while (i < text.length) {
    const ch = text[i];
    let m;
    let node;
    if (ch === '\\' && (m = at(ESCAPED, text, i))) {
      plain += m[1]; i += 2; continue;
    }
    if (ch === '`') {
      const run = at(TICKS, text, i)[0];
      const end = text.indexOf(run, i + run.length + 1);
      if (end !== -1) {
        i = put(el('code', { class: 'inline' }, text.slice(i + run.length, end)), end + run.length);
      } else {
        plain += run; i += run.length;
      }
      continue;
    }
    if (ch === '<' && (m = at(TIMESTAMP, text, i)) && (node = timestamp(m[1], m[2]))) {
      i = put(node, i + m[0].length); continue;
    }
    if (ch === '<' && (m = at(ANGLED_LINK, text, i)) && (node = safeLink(m[1]))) {
      i = put(node, i + m[0].length); continue;
    }
    if (ch === '[' && (m = at(MASKED_LINK, text, i)) && (node = safeLink(m[2], inline(m[1], MAX_NESTING)))) {
      i = put(node, i + m[0].length); continue;
    }
    if (ch === 'h' && (m = at(BARE_LINK, text, i)) && (node = safeLink(m[0]))) {
      i = put(node, i + m[0].length); continue;
    }
    if (depth < MAX_NESTING) {
      const span = SPANS.find(([marker, , wordBound]) => text.startsWith(marker, i)
        && spanEnd(text, i, marker, wordBound) !== -1);
      if (span) {
        const [marker, make, wordBound] = span;
        const end = spanEnd(text, i, marker, wordBound);
        i = put(make(inline(text.slice(i + marker.length, end), depth + 1)), end + marker.length);
        continue;
      }
    }
    plain += ch;
    i += 1;
  }
  flush();
  return out;
}

// One run of text outside code blocks: quotes and headings by line, the rest inline.
function blocks(text, depth) {
  const out = [];
  const lines = text.split('\n');
  for (let n = 0; n < lines.length; n += 1) {
    const line = lines[n];
    const last = n === lines.length - 1;
    let m;
    if ((m = line.match(/^>>> ([\s\S]*)$/))) {
      out.push(el('blockquote', {}, inline([m[1], ...lines.slice(n + 1)].join('\n'), depth)));
      break;
    } else if ((m = line.match(/^> (.*)$/))) {
      out.push(el('blockquote', {}, inline(m[1], depth)));
    } else if ((m = line.match(/^(#{1,3}) (.+)$/))) {
      out.push(el(`h${m[1].length + 2}`, { class: 'md-heading' }, inline(m[2], depth)));
    } else {
      out.push(...inline(line, depth));
      if (!last) out.push('\n');
    }
  }
  return out;
}

// A message's text as Discord renders it.
function markdown(text) {
  const source = String(text || '');
  const out = [];
  let i = 0;
  while (i < source.length) {
    const open = source.indexOf('```', i);
    const close = open === -1 ? -1 : source.indexOf('```', open + 3);
    if (open === -1 || close === -1) {
      out.push(...blocks(source.slice(i), 0));
      break;
    }
    if (open > i) out.push(...blocks(source.slice(i, open), 0));
    let body = source.slice(open + 3, close);
    const language = body.match(/^([A-Za-z0-9_+#.-]{1,32})\n/);
    if (language) body = body.slice(language[0].length);
    else if (body.startsWith('\n')) body = body.slice(1);
    out.push(el('pre', { class: 'codeblock' }, el('code', language ? { 'data-language': language[1] } : {}, body.replace(/\n$/, ''))));
    i = close + 3;
    if (source[i] === '\n') i += 1;
  }
  return out;
}

// A session as the server names it for typing back (`#ops`, `#release-checklist`,
// `#channel_<id>`: its `reference`), never its raw title, which may hold spaces.
function sessionLabel(s) {
  if (!s) return '';
  const reference = s.reference || (s.token ? `#${s.token}` : s.channelId);
  if (s.kind === 'dm' && s.title) return `${reference} (DM ${s.title})`;
  return reference;
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
  el('div', { class: 'text' }, markdown(m.text)))));
  if (atBottom) list.scrollTop = list.scrollHeight;
}

$('compose').addEventListener('submit', async (event) => {
  event.preventDefault();
  const text = $('compose-text');
  if (!text.value.trim() || !state.session) return;
  try {
    // The server turns @name and #channel into mentions, as Discord's client does.
    await api('POST', '/console/api/compose', {
      sessionId: state.session, authorId: $('compose-user').value, content: text.value,
    });
    text.value = '';
    refresh();
  } catch (error) { toast(`Not posted: ${error.message}`); }
});

// ---------- approvals ----------

function secondsLeft(card) {
  return `${Math.max(0, Math.round((card.expiresAtMs - (Date.now() + state.clockSkewMs)) / 1000))}s left`;
}

function renderApprovals(data) {
  const pending = data.approvals || [];
  state.approvals = pending;
  state.clockSkewMs = (data.nowMs || Date.now()) - Date.now();
  const badge = $('approvals-count');
  badge.hidden = pending.length === 0;
  badge.textContent = String(pending.length);
  if (state.view !== 'approvals') return;
  // With permissions.console_approves = false the console only watches: no buttons at all;
  // a login whose scope does not name approvals.decide sees its own asks, without buttons.
  const decides = data.consoleApproves && data.mayDecide;
  const me = state.me && state.me.principal;
  $('approvals-note').textContent = !data.consoleApproves
    ? 'Approvals are decided in Discord only (permissions.console_approves = false): an approver answers on the card there.'
    : (!data.mayDecide
      ? `This login sees only the asks its own calls wait on; deciding takes the operator or a token whose scope names approvals.decide.${pending.length ? '' : ' Nothing of yours is waiting.'}`
      : (pending.length ? '' : 'Nothing is waiting for approval.'));
  renderIfChanged($('approvals'), [pending.map((c) => c.id), decides, me], () => pending.map((card) => {
    const decide = (approve) => async () => {
      try {
        await api('POST', `/console/api/approvals/${encodeURIComponent(card.id)}`, { approve });
        toast(`${approve ? 'Approved' : 'Denied'}: ${card.tool}`);
      } catch (error) { toast(`Not decided: ${error.message}`); }
      refresh(['approvals', 'health']);
    };
    const own = card.owner === me && !data.selfApproval;
    let actions;
    if (!data.consoleApproves) actions = el('div', { class: 'muted small' }, 'Waiting for an approver in Discord.');
    else if (own) actions = el('div', { class: 'muted small', 'data-own': card.id }, 'Your own request: another approver decides it.');
    else if (!decides) actions = el('div', { class: 'muted small' }, 'Waiting for an approver.');
    else {
      actions = el('div', { class: 'actions' },
        el('button', { type: 'button', class: 'approve', 'data-approval': card.id, onclick: decide(true) }, 'Approve'),
        el('button', { type: 'button', class: 'deny', 'data-approval': card.id, onclick: decide(false) }, 'Deny'));
    }
    // The whole input, never cut: what the call will run, and what the binding hashes.
    return el('li', { class: 'approval', 'data-approval-card': card.id },
      el('div', {}, el('strong', {}, card.tool), ' in ', el('strong', {}, card.sessionLabel)),
      el('div', { class: 'muted small' }, `Asked by ${card.requestedBy} · binding ${card.binding} · `,
        el('span', { 'data-left': card.id }, secondsLeft(card))),
      el('div', { class: 'muted small' }, `The whole input (${[...card.preview].length} characters), as the call will run it:`),
      el('pre', { class: 'preview', 'data-preview': card.id }, card.preview),
      actions);
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
      // What the call caused in the workspace (shell.started/exited, fs.changed).
      if (r.events && r.events.length) detail.events = r.events;
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
      ? el('div', { class: 'table-wrap' }, el('table', { class: 'rules' }, el('thead', {}, el('tr', {}, ['Rule', 'Tool', 'Session', 'Origin', 'Caller', 'Policy'].map((h) => el('th', { scope: 'col' }, h)))),
        el('tbody', {}, rules.map((r) => el('tr', { 'data-rule': r.name },
          el('td', {}, r.name), el('td', {}, r.tool),
          el('td', {}, r.session || el('span', { class: 'muted' }, 'any')),
          el('td', {}, r.origin || el('span', { class: 'muted' }, 'any')),
          el('td', {}, r.caller),
          el('td', { class: `d-${r.policy}` }, r.policy))))))
      : el('div', { class: 'muted' }, 'No rule names this session.')]);
  const changes = !state.me || state.me.mayChangeScopes;
  $('scope-form').hidden = !changes;
  $('scope-readonly').hidden = changes;
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

// ---------- memory ----------

function noteItem(note) {
  return el('li', { class: 'note', 'data-scope': note.scope, 'data-key': note.key },
    el('strong', {}, note.key),
    note.untrusted ? el('span', { class: 'chip untrusted' }, 'untrusted') : '',
    el('span', { class: 'muted small' }, ` ${note.scope} · ${time(note.updatedMs)}`),
    el('div', { class: 'note-text' }, note.text),
    el('button', { type: 'button', class: 'forget', 'data-scope': note.scope, 'data-key': note.key }, 'Delete'));
}

async function loadMemory() {
  if (!state.scopeSession) return;
  const data = await api('GET', `/console/api/sessions/${encodeURIComponent(state.scopeSession)}/memory`);
  const summary = data.summary || {};
  renderIfChanged($('memory-summary'), data.summary, () => data.summary === null
    ? [el('span', { class: 'muted' }, 'Reading the summary takes a login whose scope names memory.summary.')]
    : summary.summary
    ? [el('div', { class: 'muted small' }, `${summary.tokens || 0} tokens, covers through message ${summary.coversTo || '—'}, written ${time(summary.createdMs)}`),
      el('pre', { id: 'memory-summary-text', class: 'summary-text' }, summary.summary)]
    : [el('span', { class: 'muted' }, 'No summary: this session was never compacted.')]);
  const notes = data.notes;
  renderIfChanged($('memory-notes'), notes, () => notes === null
    ? [el('li', { class: 'muted' }, 'Reading notes takes a login whose scope names memory.read.')]
    : (notes.length ? notes.map(noteItem) : [el('li', { class: 'muted' }, 'No notes.')]));
  const users = data.userNotes;
  renderIfChanged($('memory-user-notes'), users, () => users === null
    ? [el('li', { class: 'muted' }, 'Listing every user\'s notes takes the operator or a token whose scope names admin.memory.list.')]
    : (users.length ? users.map(noteItem) : [el('li', { class: 'muted' }, 'No notes.')]));
}

document.addEventListener('click', async (event) => {
  const button = event.target.closest && event.target.closest('button.forget');
  if (!button) return;
  const scope = button.getAttribute('data-scope');
  const key = button.getAttribute('data-key');
  try {
    const answer = await api('POST', '/console/api/memory/forget', { scope, key });
    $('memory-error').textContent = '';
    toast(answer.forgotten ? `Note ${key} deleted` : `Note ${key} was already gone`);
  } catch (error) { $('memory-error').textContent = error.message; }
  refresh(['scope']);
});

// ---------- runs and health ----------

function renderGateway(gateway) {
  const pill = $('health');
  pill.textContent = `gateway: ${gateway}`;
  pill.className = `pill ${gateway}`;
}

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  node.append(...children);
  return node;
}

// A sparkline of `values` (oldest first) as inline SVG: no library, no request.
function sparkline(label, values, unit) {
  const width = 240; const height = 40; const pad = 2;
  const max = Math.max(...values, 0);
  const scale = max > 0 ? (height - 2 * pad) / max : 0;
  const step = values.length > 1 ? (width - 2 * pad) / (values.length - 1) : 0;
  const points = values.map((v, i) => `${(pad + i * step).toFixed(1)},${(height - pad - v * scale).toFixed(1)}`).join(' ');
  const last = values.length ? values[values.length - 1] : 0;
  const shown = (v) => (v >= 10 ? v.toFixed(0) : v.toFixed(2));
  const chart = svg('svg', { class: 'spark', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': `${label}: now ${shown(last)} ${unit}, peak ${shown(max)}` },
    svg('title', {}, `${label}: now ${shown(last)} ${unit}, peak ${shown(max)} over the last ${values.length} samples`),
    svg('line', { x1: 0, y1: height - pad, x2: width, y2: height - pad, class: 'spark-axis' }),
    values.length > 1 ? svg('polyline', { points, class: 'spark-line', fill: 'none' }) : svg('g', {}));
  return el('figure', { class: 'spark-figure', 'data-spark': label },
    el('figcaption', {}, el('span', {}, label), el('span', { class: 'mono' }, `${shown(last)} ${unit}`)), chart);
}

function meter(label, used, limit, detail) {
  const share = limit > 0 ? Math.min(1, used / limit) : 0;
  const level = share >= 0.9 ? 'bad' : share >= 0.6 ? 'warn' : 'ok';
  return el('div', { class: 'meter-row' },
    el('div', { class: 'meter-label' }, el('span', {}, label), el('span', { class: 'mono small' }, detail)),
    el('meter', { min: '0', max: String(limit || 1), value: String(used), low: String((limit || 1) * 0.6), high: String((limit || 1) * 0.9), optimum: '0', class: level, 'aria-label': `${label}: ${detail}` }));
}

function renderRateLimits(limits) {
  const box = $('rate-limits');
  if (!limits) {
    renderIfChanged(box, null, () => [el('p', { class: 'muted' }, 'No Discord REST client here (the tool server runs without the bot).')]);
    return;
  }
  const g = limits.global; const inv = limits.invalid;
  const rows = (limits.buckets || []).map((b) => el('tr', { 'data-bucket': b.route },
    el('td', { class: 'mono' }, b.route),
    el('td', { class: 'mono' }, b.remaining === null || b.remaining === undefined ? '?' : String(b.remaining), ' / ', b.limit === null || b.limit === undefined ? '?' : String(b.limit)),
    el('td', { class: 'mono' }, b.resetAfterMs ? `${(b.resetAfterMs / 1000).toFixed(1)} s` : '—'),
    el('td', { class: 'mono' }, String(b.waiting))));
  renderIfChanged(box, limits, () => [
    meter('Global (per second)', g.used, g.limit, `${g.used} / ${g.limit} used${g.pausedForMs ? ` · paused ${(g.pausedForMs / 1000).toFixed(1)} s` : ''}`),
    meter('Invalid requests (401/403/429)', inv.count, inv.budget, `${inv.count} / ${inv.budget} in ${inv.windowS / 60} min (Discord bans at ${inv.discordLimit})`),
    el('div', { class: 'table-wrap' }, el('table', { class: 'buckets' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Bucket (a route using it)'), el('th', { scope: 'col' }, 'Left'), el('th', { scope: 'col' }, 'Resets in'), el('th', { scope: 'col' }, 'Waiting'))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: '4', class: 'muted' }, 'No bucket learned yet: Discord names them in its answers.'))))),
    el('p', { class: 'muted small' }, `${limits.bucketsTracked} bucket(s) tracked; the tightest shown first.`)]);
}

function renderHealth(h) {
  renderGateway(h.gateway);
  if (state.me) state.me.botUserId = h.botUserId;
  if (state.view !== 'runs') return;
  const facts = [['Gateway', h.gateway], ['Version', h.version], ['Pending approvals', h.pendingApprovals], ['Console logins', h.consoleLogins], ['Event streams', h.eventStreams], ['Updates', liveMode()]];
  $('health-detail').replaceChildren(...facts.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))]));
  renderRateLimits(h.rateLimits);
  const points = (h.series && h.series.points) || [];
  const every = (h.series && h.series.everyS) || 5;
  const pick = (key) => points.map((p) => Number(p[key]) || 0);
  renderIfChanged($('sparklines'), points, () => (points.length ? [
    sparkline('Calls', pick('callsPerS'), '/s'),
    sparkline('Errors', pick('errorsPerS'), '/s'),
    sparkline('Events', pick('eventsPerS'), '/s'),
    sparkline('Agent runs', pick('runsPerMin'), '/min'),
  ] : [el('p', { class: 'muted' }, `The first point comes ${every * 2} s after the server started; one every ${every} s after that.`)]));
}

async function loadRuns() {
  const data = await api('GET', '/console/api/runs');
  // The usage chart is drawn by the server (an SVG image): fetched again with the panel.
  const chart = $('usage-chart');
  if (chart) chart.src = `/console/api/usage.svg?at=${Date.now()}`;
  const trigger = (t) => (t ? `${t.author}: ${t.text}` : '—');
  const active = data.active || [];
  renderIfChanged($('runs-active'), [active, data.agent], () => (active.length ? active.map((r) => el('tr', {},
    el('td', {}, r.session || r.sessionId), el('td', {}, trigger(r.running)), el('td', {}, String((r.waiting || []).length)),
    el('td', {}, r.running && state.me && state.me.mayAbort ? el('button', { type: 'button', class: 'deny', onclick: async () => {
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
// The page follows the console's event stream (/console/api/events, the login cookie is
// its credential): each event re-reads only what it changed, and only when that is on screen.
// Polling (every POLL_MS) runs only while the stream is down; the stream is retried meanwhile.
// The indicator in the header says which: live, reconnecting, or polling.

// What a refresh may read: `all` is everything the visible view shows.
const PARTS = ['health', 'approvals', 'sessions', 'messages', 'audit', 'scope', 'runs'];

async function refresh(parts) {
  const wanted = parts ? new Set(parts) : new Set(['all']);
  if (!state.csrf) return;
  if (state.busy) {
    state.pending = state.pending || new Set();
    for (const part of wanted) state.pending.add(part);
    return;
  }
  state.busy = true;
  const want = (part) => wanted.has('all') || wanted.has(part);
  try {
    const reads = [];
    if (want('health')) reads.push(api('GET', '/console/api/health').then(renderHealth));
    if (want('approvals')) reads.push(api('GET', '/console/api/approvals').then(renderApprovals));
    await Promise.all(reads);
    if (state.view === 'sessions') {
      if (want('sessions')) await loadSessions();
      if (want('messages') || want('sessions')) await loadMessages();
    } else if (state.view === 'audit') {
      if (!state.sessions.length) await loadSessions();
      if (want('audit')) await loadAudit();
    } else if (state.view === 'scopes') {
      if (want('sessions') || want('scope')) { await loadSessions(); await loadScope(); await loadMemory(); }
    } else if (state.view === 'runs') {
      if (!state.sessions.length) await loadSessions();
      if (want('runs')) await loadRuns();
    }
  } catch (error) {
    if (error.status !== 401) toast(error.message);
  } finally {
    state.busy = false;
    if (state.pending) {
      const next = [...state.pending];
      state.pending = null;
      setTimeout(() => refresh(next.includes('all') ? undefined : next), 0);
    }
  }
}

const POLL_MS = 1500;
const STREAM_RETRY_MS = 10000;
// How long the browser may try to reconnect on its own before the page polls meanwhile.
const RECONNECT_GRACE_MS = 4000;
const EVENT_TYPES = ['call.finished', 'message.created', 'message.edited', 'message.deleted',
  'approval.requested', 'approval.decided', 'run.started', 'run.finished', 'workflow.waiting',
  'workflow.answered', 'workflow.timed_out', 'workflow.cancelled', 'gateway.state',
  'health.sampled', 'stream.gap', 'stream.dropped', 'stream.closed'];

const live = {
  source: null, poller: null, retry: null, grace: null, flush: null,
  mode: 'off', events: 0, polls: 0, kinds: {}, wanted: new Set(),
};

function liveMode() {
  if (live.mode === 'live') return 'live: following the server\'s event stream';
  if (live.mode === 'polling') return `polling every ${POLL_MS / 1000} s (the event stream is down; retrying)`;
  return live.mode;
}

// The header's indicator; its data attributes let a test see how updates arrived.
function setMode(mode) {
  live.mode = mode;
  const node = $('live-mode');
  node.textContent = mode;
  node.className = `live-mode ${mode}`;
  node.dataset.mode = mode;
  node.dataset.events = String(live.events);
  node.dataset.polls = String(live.polls);
  node.title = liveMode();
}

function countEvent(kind) {
  live.events += 1;
  live.kinds[kind] = (live.kinds[kind] || 0) + 1;
  const node = $('live-mode');
  node.dataset.events = String(live.events);
  node.dataset.lastEvent = kind;
}

// Collects what events asked for and reads it once, shortly after.
function want(...parts) {
  for (const part of parts) live.wanted.add(part);
  if (live.flush) return;
  live.flush = setTimeout(() => {
    live.flush = null;
    const parts = [...live.wanted];
    live.wanted.clear();
    refresh(parts.includes('all') ? undefined : parts);
  }, 50);
}

function onEvent(event) {
  const kind = event.type;
  countEvent(kind);
  let data = {};
  try { data = JSON.parse(event.data || '{}') || {}; } catch (_) { data = {}; }
  const me = state.me && state.me.caller;
  if (kind.startsWith('message.')) {
    if (String(data.session) === String(state.session)) want('messages');
    if (!state.sessions.some((s) => s.channelId === String(data.session))) want('sessions');
  } else if (kind.startsWith('approval.')) {
    want('approvals', 'health');
  } else if (kind === 'call.finished') {
    // The console's own reads are calls too: following them would read forever.
    if (data.caller === me && CONSOLE_READS.has(data.tool)) return;
    want('audit', 'runs');
  } else if (kind.startsWith('run.') || kind.startsWith('workflow.')) {
    want('runs');
  } else if (kind === 'gateway.state') {
    renderGateway(data.state);
    want('health');
  } else if (kind === 'health.sampled') {
    if (state.view === 'runs') want('health');
  } else if (kind === 'stream.gap' || kind === 'stream.dropped') {
    want('all');
  } else if (kind === 'stream.closed') {
    if (data.reason === 'session_ended') { showLogin('Your console login ended; log in again.'); return; }
    // The server is stopping: the browser reconnects by itself.
    setMode('reconnecting');
  }
}

function startLive() {
  stopLive();
  if (!('EventSource' in window)) { startPolling(); return; }
  openStream();
}

function openStream() {
  const source = new EventSource('/console/api/events');
  live.source = source;
  setMode(live.poller ? 'polling' : 'reconnecting');
  source.onopen = () => {
    clearTimeout(live.grace); live.grace = null;
    clearTimeout(live.retry); live.retry = null;
    stopPolling();
    setMode('live');
    // Whatever happened while the stream was away.
    want('all');
  };
  source.onerror = () => {
    if (live.source !== source) return;
    if (source.readyState === EventSource.CLOSED) {
      // Refused (a 401, a 503 when too many streams are open): poll, and try again later.
      source.close();
      live.source = null;
      startPolling();
      clearTimeout(live.retry);
      live.retry = setTimeout(() => { if (state.csrf && !live.source) openStream(); }, STREAM_RETRY_MS);
      return;
    }
    // The browser is reconnecting (with Last-Event-ID); poll if it takes a while.
    if (!live.poller) setMode('reconnecting');
    if (!live.grace) live.grace = setTimeout(() => { live.grace = null; if (live.source === source && source.readyState !== EventSource.OPEN) startPolling(); }, RECONNECT_GRACE_MS);
  };
  for (const kind of EVENT_TYPES) source.addEventListener(kind, onEvent);
}

function startPolling() {
  if (!live.poller) {
    live.poller = setInterval(() => { live.polls += 1; $('live-mode').dataset.polls = String(live.polls); refresh(); }, POLL_MS);
  }
  setMode('polling');
}

function stopPolling() {
  if (live.poller) clearInterval(live.poller);
  live.poller = null;
}

function stopLive() {
  if (live.source) live.source.close();
  stopPolling();
  clearTimeout(live.retry); clearTimeout(live.grace); clearTimeout(live.flush);
  live.source = null; live.retry = null; live.grace = null; live.flush = null;
  live.wanted.clear();
  setMode('off');
}

// Approvals count down between events without asking the server.
setInterval(() => {
  if (!state.csrf || !state.approvals) return;
  for (const card of state.approvals) {
    const left = document.querySelector(`[data-left="${card.id}"]`);
    if (left) left.textContent = secondsLeft(card);
  }
}, 1000);

// ---------- start ----------

showApp().catch((error) => showLogin(error.status === 401 ? '' : error.message));
