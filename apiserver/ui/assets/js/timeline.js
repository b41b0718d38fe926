// The DaemonSet's events as a timeline: each occurrence a tick on its reason's row, so the
// failed-pod backoff (1 s, 2 s, 4 s, …) shows as ticks spreading apart. An Event object
// stands for several occurrences once the recorder aggregates them (count, lastTimestamp):
// every count increase seen on the watch is one more tick.

function eventTime(ev) {
  return Date.parse(ev.lastTimestamp || ev.eventTime || ev.firstTimestamp || ev.metadata.creationTimestamp);
}

function firstTime(ev) {
  return Date.parse(ev.firstTimestamp || ev.eventTime || ev.metadata.creationTimestamp);
}

export class Timeline {
  constructor(canvas, list) {
    this.canvas = canvas;
    this.list = list;
    this.occ = []; // {t, reason, type, message}
    this.seen = new Map(); // event uid → count already counted
    this.frame = 0;
    this.wait = 0;
    this.timer = setInterval(() => this.schedule(), 1000);
  }

  destroy() {
    clearInterval(this.timer);
    if (this.frame) cancelAnimationFrame(this.frame);
  }

  reset(events) {
    this.occ = [];
    this.seen = new Map();
    for (const ev of events) this.observe(ev, true);
  }

  // observe adds the occurrences ev stands for that were not counted yet.
  observe(ev, listed) {
    const count = ev.count || 1;
    const had = this.seen.get(ev.metadata.uid) || 0;
    if (count <= had) return;
    const base = { reason: ev.reason, type: ev.type, message: ev.message };
    if (had === 0) {
      this.insert({ ...base, t: firstTime(ev) });
      if (count > 1) {
        // A listed event aggregates occurrences in between we never saw; mark the last.
        this.insert({ ...base, t: eventTime(ev), aggregated: listed && count > 2 ? count - 2 : 0 });
      }
    } else {
      this.insert({ ...base, t: eventTime(ev), aggregated: count - had > 1 ? count - had - 1 : 0 });
    }
    this.seen.set(ev.metadata.uid, count);
    if (this.occ.length > 5000) this.occ.splice(0, this.occ.length - 5000);
    this.schedule();
  }

  // insert keeps occ in time order; occurrences mostly arrive in order, so this is a push.
  insert(o) {
    let i = this.occ.length;
    while (i > 0 && this.occ[i - 1].t > o.t) i--;
    this.occ.splice(i, 0, o);
  }

  // schedule redraws at most four times a second: during a rollout over thousands of nodes
  // events arrive by the hundred per second, and a timeline needs no more.
  schedule() {
    if (this.frame || this.wait) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
      this.renderList();
      this.wait = setTimeout(() => { this.wait = 0; }, 250);
    });
  }

  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth;
    const reasons = [...new Set(this.occ.map((o) => o.reason))].sort();
    const rowH = 18;
    const h = Math.max(40, reasons.length * rowH + 24);
    c.style.height = `${h}px`;
    if (!w) return;
    c.width = Math.round(w * dpr);
    c.height = Math.round(h * dpr);
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const padL = 130;
    const now = Date.now();
    const t0 = this.occ.length ? Math.min(this.occ[0].t, now - 30000) : now - 60000;
    const span = Math.max(now - t0, 10000);
    const x = (t) => padL + ((t - t0) / span) * (w - padL - 10);
    g.font = '11px system-ui, sans-serif';
    reasons.forEach((r, i) => {
      const yy = 8 + i * rowH;
      g.fillStyle = '#333';
      g.fillText(r, 4, yy + 11);
      g.strokeStyle = '#eee';
      g.beginPath();
      g.moveTo(padL, yy + rowH / 2);
      g.lineTo(w - 10, yy + rowH / 2);
      g.stroke();
    });
    for (const o of this.occ) {
      const i = reasons.indexOf(o.reason);
      const yy = 8 + i * rowH;
      g.fillStyle = o.type === 'Warning' ? '#c0392b' : '#2b7de9';
      g.fillRect(Math.round(x(o.t)) - 1, yy + 2, 3, rowH - 4);
    }
    g.fillStyle = '#555';
    const secs = span / 1000;
    g.fillText(`-${secs >= 120 ? `${Math.round(secs / 60)}m` : `${Math.round(secs)}s`}`, padL, h - 4);
    g.fillText('now', w - 30, h - 4);
  }

  // renderList shows the latest occurrences with the gap since the previous one of the same
  // reason: the backoff reads 1s, 2s, 4s, … down the list.
  renderList() {
    const prev = new Map();
    const rows = [];
    for (const o of this.occ) {
      const p = prev.get(o.reason);
      rows.push({ o, gap: p === undefined ? null : (o.t - p) / 1000 });
      prev.set(o.reason, o.t);
    }
    const frag = document.createDocumentFragment();
    for (const { o, gap } of rows.slice(-200).reverse()) {
      const li = document.createElement('li');
      li.className = o.type === 'Warning' ? 'warn' : '';
      li.dataset.reason = o.reason;
      if (gap !== null) li.dataset.gap = String(gap);
      const time = new Date(o.t).toLocaleTimeString();
      const gapText = gap === null ? '' : ` (+${gap.toFixed(0)}s)`;
      const agg = o.aggregated ? ` [+${o.aggregated} more]` : '';
      li.textContent = `${time}${gapText} ${o.reason}: ${o.message}${agg}`;
      frag.appendChild(li);
    }
    this.list.replaceChildren(frag);
  }
}
