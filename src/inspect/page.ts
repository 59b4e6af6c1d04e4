/**
 * The inspector page: plain HTML and a small script (no build step, no CDN).
 * It loads mermaid.min.js (served from node_modules) and the machine's
 * Mermaid text from machine.mmd, draws one diagram per endpoint, and follows
 * events (server-sent events; all relative to the page, whose URL holds the
 * run's secret): 'snapshot' with every endpoint, then
 * 'endpoint' for each change. The machine is drawn once and copied into each
 * endpoint's card; the current state is highlighted by marking the
 * diagram's node (data-id / id "…-state-NAME-n") with the class smcuda-current,
 * and shown large in each card's header. Without mermaid (an optional
 * package) the page says what to install, and works on without diagrams.
 * Readable at 1280 px: one card per row there, the diagram at its own size.
 *
 * Test hooks: each endpoint is `[data-endpoint="self→peer"]`, its state
 * `[data-role=state]` with `data-state`; its persistent transfers are rows
 * `[data-transfer=ID]` of `[data-role=persistent]`, each state a cell with
 * `data-persistent-state`.
 */
export function inspectorPage(title: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>${escapeHtml(title)}</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1rem 1.5rem; color: #222; background: #fafafa; }
  header { display: flex; gap: 1rem; align-items: baseline; }
  header .source, header .conn { color: #666; }
  /* One card per row up to wide screens: the machine's labels stay readable (about its own size) at 1280 px. */
  #endpoints { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 1100px), 1fr)); gap: 1rem; }
  .endpoint { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .75rem 1rem; }
  .endpoint h2 { font-size: 1.05rem; margin: 0 0 .5rem; display: flex; gap: .6rem; align-items: center; }
  .state { font-weight: 800; font-size: 1.6rem; letter-spacing: .02em; padding: .15rem .7rem; border-radius: 6px; background: #eee; border: 2px solid #999; }
  .state-label { font-size: .8rem; text-transform: uppercase; color: #666; }
  #notice { background: #fff3cd; border: 1px solid #e0c36a; border-radius: 6px; padding: .6rem 1rem; margin: .5rem 0 1rem; }
  #notice code { background: #fff; padding: 0 .3rem; border-radius: 3px; }
  .state[data-state=OK] { background: #c8e6c9; color: #1b5e20; border-color: #2e7d32; }
  .state[data-state=BAD] { background: #ffcdd2; color: #b71c1c; border-color: #c62828; }
  .state[data-state=SENT], .state[data-state=ACKING], .state[data-state=ACKED] { background: #fff3cd; color: #7a5b00; border-color: #b28704; }
  .diagram svg { max-width: 100%; height: auto; }
  .diagram .muted { font-style: italic; }
  .smcuda-current rect, .smcuda-current path, .smcuda-current polygon { fill: #ffd54f !important; stroke: #e65100 !important; stroke-width: 3px !important; }
  table { border-collapse: collapse; font-size: 12px; }
  td, th { padding: .1rem .6rem .1rem 0; text-align: left; }
  .cols { display: flex; gap: 2rem; flex-wrap: wrap; }
  .muted { color: #888; }
</style>
</head>
<body>
<header><h1>${escapeHtml(title)}</h1><span class="source" id="source"></span><span class="conn" id="conn">connecting…</span></header>
<div id="notice" hidden></div>
<p id="empty" class="muted">No endpoint yet: waiting for trace records.</p>
<div id="endpoints"></div>
<script src="mermaid.min.js"></script>
<script>
(() => {
  const CACHE_KEYS = ['hit', 'miss', 'stale', 'evict', 'invalidate', 'open', 'open-failed', 'close'];
  const cards = new Map();
  let startUs = null;
  // Without mermaid (an optional package) the page says what to install, and works on without diagrams.
  const haveMermaid = typeof mermaid !== 'undefined';
  if (haveMermaid) mermaid.initialize({ startOnLoad: false, securityLevel: 'strict', theme: 'default' });
  else {
    fetch('/mermaid.min.js').then((r) => r.text()).catch(() => '').then((why) => {
      const n = document.getElementById('notice');
      n.replaceChildren(el('strong', {}, 'No diagrams: '), document.createTextNode(why.trim() || 'the mermaid package is not installed; run npm install mermaid, then reload.'),
        el('br'), document.createTextNode('Endpoints, states, transitions and counters below work without it.'));
      n.hidden = false;
    });
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function ms(t) { return startUs === null ? '' : '+' + ((t - startUs) / 1000).toFixed(1) + ' ms'; }

  function highlight(card, state) {
    const svg = card.querySelector('.diagram svg');
    if (!svg) return;
    for (const n of svg.querySelectorAll('.smcuda-current')) n.classList.remove('smcuda-current');
    const re = new RegExp('-state-' + state + '-\\\\d+$');
    for (const n of svg.querySelectorAll('g.node, g.statediagram-cluster')) {
      if (n.getAttribute('data-id') === state || re.test(n.id)) n.classList.add('smcuda-current');
    }
  }

  // One rendering of the machine, copied into every card (same picture; only the highlight differs).
  const drawing = haveMermaid
    ? fetch('machine.mmd').then((r) => r.text()).then((text) => mermaid.render('smcuda-machine', text)).then((r) => r.svg)
    : null;

  async function draw(card) {
    if (!drawing) {
      card.querySelector('.diagram').replaceChildren(el('p', { class: 'muted' }, 'no diagram: mermaid is not installed (see above)'));
      return;
    }
    card.querySelector('.diagram').innerHTML = await drawing;
    highlight(card, card.dataset.current);
  }

  function update(v) {
    document.getElementById('empty').hidden = true;
    let card = cards.get(v.key);
    if (!card) {
      card = el('section', { class: 'endpoint', 'data-endpoint': v.key });
      const h = el('h2');
      h.append(el('span', {}, v.self + ' → ' + v.peer), el('span', { class: 'state-label' }, 'state'), el('span', { class: 'state', 'data-role': 'state' }), el('span', { class: 'muted', 'data-role': 'pid' }), el('span', { class: 'muted', 'data-role': 'closed' }));
      const cols = el('div', { class: 'cols' });
      const tr = el('div'); tr.append(el('strong', {}, 'recent transitions'), el('table', { 'data-role': 'transitions' }));
      const cc = el('div'); cc.append(el('strong', {}, 'cache'), el('table', { 'data-role': 'cache' }));
      const fr = el('div'); fr.append(el('strong', {}, 'frames'), el('table', { 'data-role': 'frames' }));
      const pt = el('div'); pt.append(el('strong', {}, 'persistent transfers'), el('table', { 'data-role': 'persistent' }));
      cols.append(tr, cc, fr, pt);
      card.append(h, el('div', { class: 'diagram' }), cols);
      document.getElementById('endpoints').append(card);
      cards.set(v.key, card);
      card.dataset.current = v.state;
      draw(card).catch((e) => (card.querySelector('.diagram').textContent = 'diagram failed: ' + e));
    }
    const st = card.querySelector('[data-role=state]');
    st.textContent = v.state;
    st.dataset.state = v.state;
    card.querySelector('[data-role=pid]').textContent = 'pid ' + v.pid;
    card.querySelector('[data-role=closed]').textContent = v.closed ? 'closed' : '';
    if (card.dataset.current !== v.state) { card.dataset.current = v.state; highlight(card, v.state); }
    const t = card.querySelector('[data-role=transitions]');
    t.replaceChildren(...(v.transitions.length ? v.transitions : [null]).map((x) => {
      const row = el('tr');
      if (!x) { row.append(el('td', { class: 'muted' }, 'none yet')); return row; }
      row.append(el('td', { class: 'muted' }, ms(x.t)), el('td', {}, x.from + '→' + x.to), el('td', { class: 'muted' }, x.reason ? x.reason : (x.tries !== undefined ? 'tries ' + x.tries : '')));
      return row;
    }));
    const c = card.querySelector('[data-role=cache]');
    c.replaceChildren(...CACHE_KEYS.map((k) => { const row = el('tr'); row.append(el('td', {}, k), el('td', { 'data-cache': k }, String(v.cache[k] || 0))); return row; }));
    const f = card.querySelector('[data-role=frames]');
    f.replaceChildren(...[['sent', v.frames.sent], ['received', v.frames.received]].map(([k, n]) => { const row = el('tr'); row.append(el('td', {}, k), el('td', {}, String(n))); return row; }));
    const p = card.querySelector('[data-role=persistent]');
    const pts = Object.values(v.persistent || {}).sort((a, b) => a.transfer - b.transfer);
    p.replaceChildren(...(pts.length ? pts : [null]).map((x) => {
      const row = el('tr');
      if (!x) { row.append(el('td', { class: 'muted' }, 'none')); return row; }
      row.dataset.transfer = String(x.transfer);
      row.append(el('td', {}, '#' + x.transfer + ' ' + x.role), el('td', { 'data-persistent-state': x.state }, x.state), el('td', { class: 'muted' }, (x.reason ? x.reason + ' · ' : '') + x.states.join('→')));
      return row;
    }));
  }

  const es = new EventSource('events');
  es.addEventListener('open', () => (document.getElementById('conn').textContent = 'live'));
  es.addEventListener('error', () => (document.getElementById('conn').textContent = 'disconnected (retrying)'));
  es.addEventListener('snapshot', (e) => {
    const s = JSON.parse(e.data);
    startUs = s.startUs ?? null;
    document.getElementById('source').textContent = s.source;
    for (const v of s.endpoints) update(v);
  });
  es.addEventListener('endpoint', (e) => {
    const v = JSON.parse(e.data);
    if (startUs === null) startUs = v.updated;
    update(v);
  });
})();
</script>
</body>
</html>
`;
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}
