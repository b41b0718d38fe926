// A line chart of a DaemonSet's status over time, drawn on a canvas: updated, available,
// unavailable and misscheduled against desired, one sample per status change.

export const SERIES = [
  { key: 'updated', label: 'updated', color: '#2b7de9' },
  { key: 'available', label: 'available', color: '#2e9d4f' },
  { key: 'unavailable', label: 'unavailable', color: '#d9822b' },
  { key: 'misscheduled', label: 'misscheduled', color: '#8e44ad' },
];

export function sampleOf(ds, t) {
  const s = ds.status || {};
  return {
    t,
    desired: s.desiredNumberScheduled || 0,
    updated: s.updatedNumberScheduled || 0,
    available: s.numberAvailable || 0,
    unavailable: s.numberUnavailable || 0,
    misscheduled: s.numberMisscheduled || 0,
  };
}

export class Chart {
  constructor(canvas) {
    this.canvas = canvas;
    this.samples = [];
    this.frame = 0;
    this.timer = setInterval(() => this.schedule(), 1000);
  }

  destroy() {
    clearInterval(this.timer);
    if (this.frame) cancelAnimationFrame(this.frame);
  }

  reset() {
    this.samples = [];
    this.schedule();
  }

  add(sample) {
    const last = this.samples[this.samples.length - 1];
    if (last && SERIES.every((s) => last[s.key] === sample[s.key]) && last.desired === sample.desired) return;
    this.samples.push(sample);
    if (this.samples.length > 20000) this.samples.splice(0, this.samples.length - 20000);
    this.schedule();
  }

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
  }

  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth;
    const h = c.clientHeight;
    if (!w || !h) return;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const pad = { l: 40, r: 10, t: 10, b: 22 };
    const pw = w - pad.l - pad.r;
    const ph = h - pad.t - pad.b;
    const now = Date.now();
    const samples = this.samples;
    const t0 = samples.length ? Math.min(samples[0].t, now - 10000) : now - 60000;
    const span = Math.max(now - t0, 10000);
    let ymax = 1;
    for (const s of samples) ymax = Math.max(ymax, s.desired, s.updated, s.available, s.unavailable, s.misscheduled);
    const x = (t) => pad.l + ((t - t0) / span) * pw;
    const y = (v) => pad.t + ph - (v / ymax) * ph;

    g.strokeStyle = '#ccc';
    g.fillStyle = '#555';
    g.font = '11px system-ui, sans-serif';
    g.lineWidth = 1;
    g.beginPath();
    for (let i = 0; i <= 4; i++) {
      const v = Math.round((ymax * i) / 4);
      const yy = Math.round(y(v)) + 0.5;
      g.moveTo(pad.l, yy);
      g.lineTo(pad.l + pw, yy);
      g.fillText(String(v), 4, yy + 4);
    }
    g.stroke();
    const secs = span / 1000;
    const step = [1, 5, 10, 30, 60, 300, 600, 1800, 3600].find((s) => secs / s <= 8) || 3600;
    for (let s = 0; s <= secs; s += step) {
      const xx = x(now - s * 1000);
      g.fillText(s === 0 ? 'now' : `-${s >= 60 ? `${Math.round(s / 60)}m` : `${s}s`}`, xx - 12, h - 6);
    }
    if (!samples.length) return;
    // desired, dashed
    g.setLineDash([4, 3]);
    g.strokeStyle = '#888';
    this.stepLine(g, samples, 'desired', x, y, now);
    g.setLineDash([]);
    g.lineWidth = 2;
    for (const s of SERIES) {
      g.strokeStyle = s.color;
      this.stepLine(g, samples, s.key, x, y, now);
    }
  }

  // stepLine draws a series as steps: a status holds until the next change.
  stepLine(g, samples, key, x, y, now) {
    g.beginPath();
    g.moveTo(x(samples[0].t), y(samples[0][key]));
    for (let i = 1; i < samples.length; i++) {
      g.lineTo(x(samples[i].t), y(samples[i - 1][key]));
      g.lineTo(x(samples[i].t), y(samples[i][key]));
    }
    g.lineTo(x(now), y(samples[samples.length - 1][key]));
    g.stroke();
  }
}
