// The node grid: one element per node, coloured by state. Changes are queued and applied
// once per animation frame, so a watch delivering thousands of events in a second costs one
// style pass per frame, not one per event.

import { STATE_LABELS } from './model.js';

export class Grid {
  constructor(container, handlers) {
    this.el = container;
    this.handlers = handlers;
    this.cells = new Map(); // node name → element
    this.order = [];
    this.pending = new Map();
    this.selected = new Set();
    this.frame = 0;
    this.lastClicked = '';
    this.el.addEventListener('click', (e) => this.onClick(e));
    this.el.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') {
        e.preventDefault();
        this.onClick(e);
      }
    });
  }

  // setNodes lays out one cell per name, in order, keeping the cells of names it had.
  setNodes(names) {
    const frag = document.createDocumentFragment();
    const next = new Map();
    for (const name of names) {
      let cell = this.cells.get(name);
      if (!cell) {
        cell = document.createElement('div');
        cell.className = 'cell s-unknown';
        cell.setAttribute('role', 'listitem');
        cell.tabIndex = -1;
        cell.dataset.node = name;
        cell.title = `${name}: loading`;
        cell.setAttribute('aria-label', cell.title);
      }
      next.set(name, cell);
      frag.appendChild(cell);
    }
    for (const name of this.selected) if (!next.has(name)) this.selected.delete(name);
    this.cells = next;
    this.order = names;
    this.el.replaceChildren(frag);
    this.el.style.setProperty('--cell', names.length > 2000 ? '9px' : names.length > 500 ? '12px' : names.length > 100 ? '18px' : '28px');
    if (names.length) this.cells.get(names[0]).tabIndex = 0;
  }

  update(cell) {
    this.pending.set(cell.node, cell);
    this.schedule();
  }

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = 0;
    for (const [name, c] of this.pending) {
      const el = this.cells.get(name);
      if (!el) continue;
      let cls = `cell s-${c.state}`;
      if (c.rev) cls += ` r-${c.rev}`;
      if (c.second) cls += ` surge s2-${c.second.state}`;
      if (c.misscheduled) cls += ' mis';
      if (this.selected.has(name)) cls += ' sel';
      if (el.className !== cls) el.className = cls;
      if (el.title !== c.text) {
        el.title = c.text;
        el.setAttribute('aria-label', c.text);
      }
      el.dataset.state = c.state;
      el.dataset.rev = c.rev || '';
      el.dataset.pods = String(c.pods || 0);
    }
    this.pending.clear();
    if (this.handlers.onFlush) this.handlers.onFlush();
  }

  onClick(e) {
    const el = e.target.closest('.cell');
    if (!el) return;
    const name = el.dataset.node;
    if (e.shiftKey && this.lastClicked) {
      const a = this.order.indexOf(this.lastClicked);
      const b = this.order.indexOf(name);
      const [lo, hi] = a < b ? [a, b] : [b, a];
      for (let i = lo; i <= hi; i++) this.selected.add(this.order[i]);
    } else if (e.ctrlKey || e.metaKey) {
      if (this.selected.has(name)) this.selected.delete(name); else this.selected.add(name);
    } else {
      this.selected = new Set([name]);
    }
    this.lastClicked = name;
    this.paintSelection();
    this.handlers.onSelect(name, [...this.selected]);
  }

  setSelection(names) {
    this.selected = new Set(names.filter((n) => this.cells.has(n)));
    this.paintSelection();
    this.handlers.onSelect('', [...this.selected]);
  }

  paintSelection() {
    for (const [name, el] of this.cells) {
      const sel = this.selected.has(name);
      if (el.classList.contains('sel') !== sel) el.classList.toggle('sel', sel);
      el.setAttribute('aria-selected', sel ? 'true' : 'false');
    }
  }
}

// legend fills el with one swatch per state.
export function legend(el) {
  const items = Object.entries(STATE_LABELS).map(([state, label]) => {
    const li = document.createElement('li');
    const sw = document.createElement('span');
    sw.className = `cell swatch s-${state}`;
    li.append(sw, document.createTextNode(label));
    return li;
  });
  const old = document.createElement('li');
  const osw = document.createElement('span');
  osw.className = 'cell swatch s-available r-old';
  old.append(osw, document.createTextNode('striped: old revision'));
  const surge = document.createElement('li');
  const ssw = document.createElement('span');
  ssw.className = 'cell swatch s-available r-new surge s2-terminating';
  surge.append(ssw, document.createTextNode('corner: a second (surge) pod'));
  const mis = document.createElement('li');
  const msw = document.createElement('span');
  msw.className = 'cell swatch s-available mis';
  mis.append(msw, document.createTextNode('outlined: misscheduled'));
  el.replaceChildren(...items, old, surge, mis);
}
