// The live card map: draws /api/view and fetches it again whenever the server's
// event stream announces a new version. Every name from the cluster goes into the page
// as text (textContent), never as markup.
'use strict';

(function () {
  const byId = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function swatch(colour) {
    const s = el('i', 'swatch');
    if (colour) s.style.background = colour;
    return s;
  }

  const noQueue = '(no queue)';
  const queueName = (q) => q || noQueue;
  const pct = (v) => Math.max(0, Math.min(100, v));
  const num = (v) => (v < 0 ? 'unlimited' : Math.round(v).toLocaleString('en'));

  // bar is a track with one segment per [percent, colour, label], and an optional mark.
  function bar(label, segments, mark) {
    const b = el('div', 'bar');
    b.setAttribute('aria-label', label);
    for (const [p, colour, title] of segments) {
      const s = el('div');
      s.style.width = pct(p).toFixed(2) + '%';
      s.style.background = colour;
      if (title) s.title = title;
      b.appendChild(s);
    }
    if (mark !== undefined) {
      const m = el('div', 'mark');
      m.style.left = 'calc(' + pct(mark).toFixed(2) + '% - 1px)';
      b.appendChild(m);
    }
    return b;
  }

  function tenantLabel(p) {
    return p.namespace + '/' + p.pod + ' [' + p.container + '] queue ' + queueName(p.queue) + ', ' + p.qos +
      ': ' + p.memoryMiB + ' MiB, ' + p.cores + '% cores';
  }

  function dominantQueue(card) {
    const by = new Map();
    for (const p of card.pods) by.set(queueName(p.queue), (by.get(queueName(p.queue)) || 0) + p.memoryMiB);
    let best = null, bestMiB = -1;
    for (const q of [...by.keys()].sort()) if (by.get(q) > bestMiB) { best = q; bestMiB = by.get(q); }
    return best;
  }

  function tile(node, card, colourOf) {
    const t = el('div', 'tile' + (card.healthy ? '' : ' unhealthy') + (card.cordon ? ' cordoned' : ''));
    t.dataset.card = card.uuid;
    if (card.pods.length) t.style.borderTopColor = colourOf(dominantQueue(card));
    const hover = [node.name + ' card ' + card.index + '  ' + card.model, card.uuid,
      'memory ' + card.usedMemoryMiB + '/' + card.capacityMiB + ' MiB, cores ' + card.usedCores + '%, tenants ' +
      card.tenants + '/' + card.shares];
    if (!card.healthy) hover.push('UNHEALTHY: takes no new tasks');
    if (card.cordon) hover.push('CORDONED since ' + card.cordon.since + ': takes no new tasks' +
      (card.cordon.reason ? ' (' + card.cordon.reason + ')' : ''));
    if (!card.pods.length) hover.push('idle');
    for (const p of card.pods) hover.push(tenantLabel(p));
    t.title = hover.join('\n');
    t.appendChild(el('div', 'title', '#' + card.index + ' ' + card.model.replace(/^NVIDIA /, '')));
    t.appendChild(el('div', 'sub', card.tenants + '/' + card.shares + ' tenants' + (card.qos ? ' · ' + card.qos : '') +
      (card.mig ? ' · MIG' : '') + (card.healthy ? '' : ' · UNHEALTHY') + (card.cordon ? ' · CORDONED' : '')));
    const cap = card.capacityMiB || 1;
    t.appendChild(bar('memory', card.pods.map((p) => [100 * p.memoryMiB / cap, colourOf(p.queue), tenantLabel(p)])));
    const memPct = card.capacityMiB ? Math.floor(100 * card.usedMemoryMiB / card.capacityMiB) : 0;
    t.appendChild(el('div', 'label', 'memory ' + memPct + '% · ' + card.usedMemoryMiB + '/' + card.capacityMiB + ' MiB'));
    t.appendChild(bar('cores', card.pods.map((p) => [p.cores, colourOf(p.queue), tenantLabel(p)])));
    t.appendChild(el('div', 'label', 'cores ' + card.usedCores + '%'));
    const tenants = el('div', 'tenants');
    for (const p of card.pods) {
      const row = el('div');
      row.appendChild(swatch(colourOf(p.queue)));
      row.appendChild(document.createTextNode(p.namespace + '/' + p.pod));
      tenants.appendChild(row);
    }
    t.appendChild(tenants);
    return t;
  }

  function drawCards(report) {
    const legend = new Map(report.legend.map((q) => [q.queue, q.colour]));
    const colourOf = (q) => legend.get(queueName(q)) || '#8a93a3';
    const tt = report.totals;
    const totals = byId('totals');
    totals.replaceChildren();
    const add = (parts) => {
      const s = el('span');
      parts.forEach((p, i) => s.appendChild(i % 2 ? el('b', null, p) : document.createTextNode(p)));
      totals.appendChild(s);
    };
    add(['', tt.nodes, ' nodes']);
    add(['', tt.cards, ' cards, ', tt.busyCards, ' in use']);
    add(['memory ', tt.memoryPercent + '%', ' (' + tt.usedMiB + ' / ' + tt.capacityMiB + ' MiB)']);
    add(['cores ', tt.coresPercent + '%']);
    if (tt.unhealthyCards) add(['', tt.unhealthyCards, ' unhealthy']);

    const lg = byId('legend');
    lg.replaceChildren();
    if (!report.legend.length) lg.appendChild(el('span', 'empty', 'No vGPU pods are running.'));
    for (const q of report.legend) {
      const s = el('span');
      s.appendChild(swatch(q.colour));
      s.appendChild(document.createTextNode(q.queue));
      lg.appendChild(s);
    }

    const nodes = byId('nodes');
    nodes.replaceChildren();
    if (!report.nodes.length) nodes.appendChild(el('div', 'empty', 'The cluster has no nodes.'));
    for (const n of report.nodes) {
      const sec = el('section', 'node');
      sec.dataset.node = n.name;
      const h = el('h3', null, n.name + ' ');
      h.appendChild(el('small', null, [n.status, n.source, n.heartbeat && 'heartbeat ' + n.heartbeat].filter(Boolean).join(' · ')));
      sec.appendChild(h);
      if (n.reason) sec.appendChild(el('div', 'why', n.reason));
      const tiles = el('div', 'tiles');
      for (const c of n.cards) tiles.appendChild(tile(n, c, colourOf));
      sec.appendChild(tiles);
      for (const p of n.problems || []) sec.appendChild(el('div', 'problems', p));
      nodes.appendChild(sec);
    }
  }

  function table(head, rows) {
    const t = el('table');
    const tr = el('tr');
    for (const h of head) tr.appendChild(el('th', null, h));
    t.appendChild(el('thead')).appendChild(tr);
    const body = el('tbody');
    for (const r of rows) body.appendChild(r);
    t.appendChild(body);
    return t;
  }

  function cell(row, cls, text) {
    const td = el('td', cls, text);
    row.appendChild(td);
    return td;
  }

  function drawQueues(view, totalCores) {
    const box = byId('queues');
    box.replaceChildren();
    byId('queue-note').textContent = view.queueShare
      ? 'card cores held against the fair share (the line)'
      : 'vgpu.QueueShare is off: the fair share (the line) is what it would be';
    if (!view.queues.length) {
      box.appendChild(el('div', 'empty', 'No Volcano queues are read.'));
      return;
    }
    const scale = Math.max(totalCores, ...view.queues.map((q) => Math.max(q.held.cores, q.deserved.cores)), 1);
    const rows = view.queues.map((q) => {
      const r = el('tr');
      r.dataset.queue = q.queue;
      const name = cell(r);
      name.appendChild(swatch(q.colour));
      name.appendChild(el('span', 'name', q.queue));
      name.appendChild(el('div', 'meta', 'weight ' + q.weight + ' of ' + q.totalWeight + (q.state && q.state !== 'Open' ? ' · ' + q.state : '')));
      const share = cell(r, 'num');
      share.appendChild(bar('cores held', [[100 * q.held.cores / scale, q.colour]], 100 * q.deserved.cores / scale));
      share.appendChild(el('div', 'label', num(q.held.cores) + ' / ' + num(q.deserved.cores) + ' cores · ' +
        num(q.held.memoryMiB) + ' / ' + num(q.deserved.memoryMiB) + ' MiB'));
      if (q.mig) {
        // MIG slices are a share of their own: whole instances, a 3g instance is 3.
        // Weights may split a slice (3.5 deserved): not rounded, as the scheduler writes it.
        const slices = (v) => String(Math.round((v || 0) * 100) / 100);
        share.appendChild(el('div', 'label mig-share', slices(q.held.migSlices) + ' / ' + slices(q.deserved.migSlices) +
          ' MIG slices · ' + slices(q.asked.migSlices) + ' asked'));
      }
      cell(r, 'num', q.running + ' running, ' + q.waiting + ' waiting');
      let standing = 'within share', cls = 'standing';
      if (q.below) { standing = 'below share'; cls += ' below'; } else if (q.over) { standing = 'above share'; cls += ' over'; }
      cell(r, cls, standing);
      return r;
    });
    box.appendChild(table(['Queue', 'Held / fair share', 'vGPU pods', ''], rows));
  }

  function age(since, now) {
    if (!since) return '';
    const s = Math.max(0, Math.round((now - Date.parse(since)) / 1000));
    if (s < 120) return s + 's';
    if (s < 7200) return Math.round(s / 60) + 'm';
    return Math.round(s / 3600) + 'h';
  }

  function drawPending(view) {
    const box = byId('pending');
    box.replaceChildren();
    byId('pending-count').textContent = view.pending.length ? view.pending.length + ' vGPU pods and gangs' : '';
    if (!view.pending.length) {
      box.appendChild(el('div', 'empty', 'No vGPU pod is waiting.'));
      return;
    }
    const now = Date.parse(view.generated);
    const rows = view.pending.map((p) => {
      const r = el('tr');
      r.dataset.pending = p.namespace + '/' + p.name;
      const who = cell(r);
      who.appendChild(swatch(p.colour));
      who.appendChild(el('span', 'name', p.name));
      const meta = [p.namespace, p.kind === 'PodGroup' ? 'gang not admitted' : '', p.job ? 'job ' + p.job : '', 'queue ' + queueName(p.queue)];
      who.appendChild(el('div', 'meta', meta.filter(Boolean).join(' · ')));
      cell(r, 'num', age(p.since, now));
      const why = cell(r, 'reason', p.reason);
      if (p.asks) why.appendChild(el('div', 'meta', 'asks ' + p.asks));
      return r;
    });
    box.appendChild(table(['Pod', 'Waiting', 'Why (the scheduler\u2019s words)'], rows));
  }

  function draw(view) {
    const ul = byId('unread');
    ul.replaceChildren(...(view.unread || []).map((u) => el('li', null, 'partial view: ' + u)));
    drawCards(view.cards);
    drawQueues(view, view.cards.totals.cards * 100);
    drawPending(view);
    byId('updated').textContent = 'data of ' + new Date(view.generated).toLocaleTimeString();
    document.body.dataset.version = String(view.version);
  }

  // Fetches run one at a time; a version announced meanwhile is fetched after.
  let shown = 0, wanted = 0, busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      while (shown < wanted || shown === 0) {
        const res = await fetch('/api/view', { cache: 'no-store' });
        if (!res.ok) throw new Error('HTTP ' + res.status);
        const view = await res.json();
        draw(view);
        shown = view.version;
        if (wanted < shown) wanted = shown;
      }
    } catch (e) {
      byId('updated').textContent = 'could not fetch the card map: ' + e.message;
    } finally {
      busy = false;
    }
  }

  function follow() {
    const live = byId('live');
    const events = new EventSource('/events');
    events.addEventListener('open', () => { live.textContent = 'live'; live.className = 'live on'; });
    events.addEventListener('error', () => { live.textContent = 'reconnecting'; live.className = 'live'; });
    events.addEventListener('view', (e) => {
      wanted = Math.max(wanted, Number(e.data) || 0);
      refresh();
    });
  }

  refresh();
  follow();
})();
