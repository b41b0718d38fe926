// The browser view: wires the informers to the grid, the counters, the chart, the
// timeline, the node panel and the actions. Everything it shows comes from list and watch
// streams; everything it changes is an ordinary API call as the signed-in user.

import { Client, Informer } from './api.js';
import { Grid, legend } from './grid.js';
import { Chart, sampleOf } from './chart.js';
import { Timeline } from './timeline.js';
import * as model from './model.js';
import * as actions from './actions.js';

const $ = (id) => document.getElementById(id);

// Figures the benchmark reads: when the first complete grid was drawn, and frame times.
const perf = { gridCompleteAt: 0, gridCells: 0, frames: [], longTasks: 0 };
window.miniplaneUI = perf;

(function measureFrames() {
  let last = 0;
  const tick = (t) => {
    if (last) {
      perf.frames.push(t - last);
      if (perf.frames.length > 20000) perf.frames.splice(0, 10000);
    }
    last = t;
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
  if (window.PerformanceObserver && PerformanceObserver.supportedEntryTypes && PerformanceObserver.supportedEntryTypes.includes('longtask')) {
    new PerformanceObserver((list) => { perf.longTasks += list.getEntries().length; }).observe({ entryTypes: ['longtask'] });
  }
}());

const app = {
  client: null,
  nodes: null, // Informer of every node
  dss: null, // Informer of every DaemonSet
  view: null, // {kind: 'overview'} or {kind: 'ds', ns, name}
  viewInformers: [],
  pods: null,
  revisions: null,
  events: null,
  podsByNode: new Map(), // node name → Map(pod key → pod), pods of the view
  currentHash: new Map(), // DaemonSet uid → current revision hash
  nodeNames: [],
  wanted: new Set(), // nodes the view's placement check says want a pod
  dirty: new Set(),
  allDirty: false,
  frame: 0,
  grid: null,
  chart: null,
  timeline: null,
  detailNode: '',
  detailPods: null,
  selection: [],
  availTimer: 0,
};

export function toast(msg, bad) {
  const el = $('toast');
  el.textContent = msg;
  el.className = bad ? 'bad' : 'ok';
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.textContent = ''; }, bad ? 10000 : 4000);
  const li = document.createElement('li');
  li.textContent = `${new Date().toLocaleTimeString()} ${msg}`;
  li.className = bad ? 'bad' : 'ok';
  $('action-log').prepend(li);
  while ($('action-log').children.length > 50) $('action-log').lastChild.remove();
}

async function main() {
  const params = new URLSearchParams(location.search);
  let session = null;
  try {
    const res = await fetch('/ui/session', { credentials: 'same-origin' });
    if (res.ok) session = await res.json();
  } catch { session = null; }
  if (!session) {
    showSignIn(params.get('signin'));
    return;
  }
  if (params.has('signin')) history.replaceState(null, '', `/ui/${location.hash}`);
  $('signin').hidden = true;
  $('app').hidden = false;
  $('whoami').textContent = `${session.user}`;
  $('whoami').title = `groups: ${(session.groups || []).join(', ')}`;
  app.client = new Client(session.csrfToken, () => showSignIn('expired'));
  $('signout').hidden = false;
  $('signout').addEventListener('click', async () => {
    await fetch('/ui/signout', { method: 'POST', headers: { 'X-CSRF-Token': session.csrfToken }, credentials: 'same-origin' });
    location.href = '/ui/';
  });
  app.grid = new Grid($('grid'), { onSelect, onFlush: gridFlushed });
  legend($('legend'));
  app.chart = new Chart($('chart'));
  app.timeline = new Timeline($('timeline'), $('events'));
  actions.install(app, toast);
  $('ds-pick').addEventListener('change', (e) => { location.hash = e.target.value; });
  $('select-all').addEventListener('click', () => app.grid.setSelection(app.nodeNames));
  $('select-none').addEventListener('click', () => app.grid.setSelection([]));
  $('select-failed').addEventListener('click', () => app.grid.setSelection(app.nodeNames.filter((n) => {
    const el = app.grid.cells.get(n);
    return el && el.dataset.state === 'failed';
  })));

  app.nodes = new Informer(app.client, '/api/v1/nodes', {}, {
    onSync: () => { relayout(); },
    onEvent: (type, node) => {
      if (type !== 'MODIFIED') relayout(); else markDirty(node.metadata.name);
      if (node.metadata.name === app.detailNode) renderNodeDetail();
    },
    onError: informerError,
  }).start();
  app.dss = new Informer(app.client, '/apis/apps/v1/daemonsets', {}, {
    onSync: () => { dsChanged(); },
    onEvent: (type, ds, old) => { dsChanged(ds, old); },
    onError: informerError,
  }).start();
  window.addEventListener('hashchange', route);
  route();
}

function informerError(err) {
  if (err.code === 403) toast(`not allowed: ${err.message}`, true);
}

function showSignIn(reason) {
  $('app').hidden = true;
  $('signout').hidden = true;
  $('signin').hidden = false;
  const msg = {
    expired: 'That sign-in link has expired or was used already (each link works once). Sign in with a token instead.',
    denied: 'The API server did not accept that token.',
  }[reason] || '';
  $('signin-msg').textContent = msg;
  $('signin-msg').hidden = !msg;
  for (const inf of [app.nodes, app.dss, ...app.viewInformers]) if (inf) inf.stop();
}

// route follows the location's hash: #/ is the overview, #/ds/NAMESPACE/NAME one DaemonSet.
function route() {
  const m = location.hash.match(/^#\/ds\/([^/]+)\/([^/]+)$/);
  const view = m ? { kind: 'ds', ns: decodeURIComponent(m[1]), name: decodeURIComponent(m[2]) } : { kind: 'overview' };
  for (const inf of app.viewInformers) inf.stop();
  app.viewInformers = [];
  app.view = view;
  app.podsByNode = new Map();
  app.currentHash = new Map();
  app.wanted = new Set();
  app.pods = app.revisions = app.events = null;
  app.chart.reset();
  app.timeline.reset([]);
  perf.gridCompleteAt = 0;
  delete app.grid.el.dataset.complete;
  $('overview').hidden = view.kind !== 'overview';
  $('dsview').hidden = view.kind !== 'ds';
  $('ds-panels').hidden = view.kind !== 'ds';
  $('ds-pick').value = view.kind === 'ds' ? `#/ds/${view.ns}/${view.name}` : '#/';
  $('grid-title').textContent = view.kind === 'ds' ? `Nodes: ${view.ns}/${view.name}` : 'Nodes: every DaemonSet';
  if (view.kind === 'overview') {
    startPods('/api/v1/pods', {});
    startRevisions('/apis/apps/v1/controllerrevisions', {});
  } else {
    startDSView();
  }
  markAll();
  renderDS();
}

function viewDS() {
  if (!app.view || app.view.kind !== 'ds' || !app.dss) return null;
  return app.dss.items.get(`${app.view.ns}/${app.view.name}`) || null;
}

// startDSView starts the DaemonSet's pod, revision and event watches once the DaemonSet is
// known (its selector and UID name them).
function startDSView() {
  const view = app.view;
  const ds = viewDS();
  if (!ds) {
    if (app.dss && app.dss.synced) $('ds-title').textContent = `${view.ns}/${view.name}: no such DaemonSet (or not allowed to see it)`;
    return;
  }
  const sel = model.selectorString(ds.spec.selector);
  const ns = encodeURIComponent(view.ns);
  startPods(`/api/v1/namespaces/${ns}/pods`, sel ? { labelSelector: sel } : {});
  startRevisions(`/apis/apps/v1/namespaces/${ns}/controllerrevisions`, sel ? { labelSelector: sel } : {});
  app.events = new Informer(app.client, `/api/v1/namespaces/${ns}/events`, { fieldSelector: `involvedObject.uid=${ds.metadata.uid}` }, {
    onSync: (items) => app.timeline.reset([...items.values()]),
    onEvent: (type, ev) => { if (type !== 'DELETED') app.timeline.observe(ev, false); },
    onError: informerError,
  }).start();
  app.viewInformers.push(app.events);
  app.chart.add(sampleOf(ds, Date.now()));
}

function startPods(path, params) {
  app.pods = new Informer(app.client, path, params, {
    onSync: (items) => {
      app.podsByNode = new Map();
      for (const p of items.values()) addPod(p);
      markAll();
    },
    onEvent: (type, pod, old) => {
      if (old) removePod(old);
      if (type !== 'DELETED') addPod(pod);
      if (old) markDirty(model.nodeOfPod(old));
      markDirty(model.nodeOfPod(pod));
      if (app.detailNode && (model.nodeOfPod(pod) === app.detailNode)) renderNodeDetail();
    },
    onError: informerError,
  }).start();
  app.viewInformers.push(app.pods);
}

function startRevisions(path, params) {
  app.revisions = new Informer(app.client, path, params, {
    onSync: () => { revisionsChanged(); markAll(); },
    onEvent: () => revisionsChanged(),
    onError: informerError,
  }).start();
  app.viewInformers.push(app.revisions);
}

const podKey = (p) => `${p.metadata.namespace}/${p.metadata.name}`;

function addPod(p) {
  const node = model.nodeOfPod(p);
  if (!node || !model.controllerUID(p)) return;
  let m = app.podsByNode.get(node);
  if (!m) app.podsByNode.set(node, (m = new Map()));
  m.set(podKey(p), p);
}

function removePod(p) {
  const m = app.podsByNode.get(model.nodeOfPod(p));
  if (m) m.delete(podKey(p));
}

function revisionsChanged() {
  const revs = [...app.revisions.items.values()];
  const next = new Map();
  for (const ds of app.dss ? app.dss.items.values() : []) {
    const cur = model.currentRevision(ds, revs);
    if (cur) next.set(ds.metadata.uid, cur.hash);
  }
  let changed = next.size !== app.currentHash.size;
  for (const [k, v] of next) if (app.currentHash.get(k) !== v) changed = true;
  app.currentHash = next;
  if (changed) markAll();
  renderRevisions();
}

function dsChanged(ds, old) {
  const all = [...app.dss.items.values()].sort((a, b) => model.nodeOrder(`${a.metadata.namespace}/${a.metadata.name}`, `${b.metadata.namespace}/${b.metadata.name}`));
  if (!ds || !old || !app.dss.items.has(`${ds.metadata.namespace}/${ds.metadata.name}`)) {
    // The list of DaemonSets changed: so does the picker.
    const picked = $('ds-pick').value;
    const opts = [new Option('Overview: every DaemonSet', '#/')];
    for (const d of all) opts.push(new Option(`${d.metadata.namespace}/${d.metadata.name}`, `#/ds/${d.metadata.namespace}/${d.metadata.name}`));
    $('ds-pick').replaceChildren(...opts);
    $('ds-pick').value = picked || '#/';
  }
  if (!app.view || app.view.kind === 'overview') renderOverviewTable(all);
  const cur = viewDS();
  if (app.view && app.view.kind === 'ds') {
    if (cur && !app.pods) startDSView();
    if (cur && (!ds || ds.metadata.uid === cur.metadata.uid)) {
      app.chart.add(sampleOf(cur, Date.now()));
      // A new template or placement rule changes every cell.
      if (!old || !ds || old.metadata.generation !== ds.metadata.generation) markAll();
      if (app.revisions) revisionsChanged();
    }
  } else if (!old || !ds || old.metadata.generation !== ds.metadata.generation) {
    markAll();
  }
  renderDS();
}

function relayout() {
  app.nodeNames = [...app.nodes.items.keys()].sort(model.nodeOrder);
  app.wanted = new Set();
  app.grid.setNodes(app.nodeNames);
  $('node-count').textContent = `${app.nodeNames.length} nodes`;
  markAll();
}

function markDirty(name) {
  if (!name) return;
  app.dirty.add(name);
  schedule();
}

function markAll() {
  app.allDirty = true;
  schedule();
}

function schedule() {
  if (!app.frame) app.frame = requestAnimationFrame(recompute);
}

// recompute turns the changed nodes into cells; the grid draws them in the same frame.
function recompute() {
  app.frame = 0;
  if (!app.nodes || !app.nodes.synced) return;
  const names = app.allDirty ? app.nodeNames : [...app.dirty];
  app.allDirty = false;
  app.dirty.clear();
  // Until the view's pods and revisions are listed, a node without a pod is not known to be
  // missing one: its cell says loading rather than "not yet created".
  if (!viewSynced()) {
    for (const name of names) app.grid.update({ node: name, state: 'unknown', text: `${name}: loading` });
    return;
  }
  const now = Date.now();
  const ds = viewDS();
  const all = app.dss ? [...app.dss.items.values()] : [];
  let soonest = 0;
  for (const name of names) {
    const node = app.nodes.items.get(name);
    if (!node) continue;
    const pods = app.podsByNode.get(name);
    let cell;
    if (app.view.kind === 'ds') {
      if (!ds) continue;
      const mine = pods ? [...pods.values()].filter((p) => model.controllerUID(p) === ds.metadata.uid) : [];
      cell = model.cellFor(ds, node, mine, app.currentHash.get(ds.metadata.uid) || '', now);
    } else {
      const perDS = all.map((d) => ({
        ds: d,
        cell: model.cellFor(d, node, pods ? [...pods.values()].filter((p) => model.controllerUID(p) === d.metadata.uid) : [], app.currentHash.get(d.metadata.uid) || '', now),
      }));
      cell = model.overviewCell(node, perDS);
      cell.availableAt = Math.min(...perDS.map((x) => x.cell.availableAt || Infinity));
      if (!Number.isFinite(cell.availableAt)) cell.availableAt = 0;
    }
    if (cell.availableAt && (!soonest || cell.availableAt < soonest)) soonest = cell.availableAt;
    if (cell.wanted) app.wanted.add(name); else app.wanted.delete(name);
    app.grid.update(cell);
  }
  if (app.grid.frame) cancelAnimationFrame(app.grid.frame);
  app.grid.flush();
  renderWantedCheck();
  // A pod Ready but not yet available turns available by time alone: look again then.
  if (soonest) {
    clearTimeout(app.availTimer);
    app.availTimer = setTimeout(markAll, Math.max(0, soonest - Date.now()));
  }
}

function viewSynced() {
  if (!app.nodes || !app.nodes.synced || !app.dss || !app.dss.synced) return false;
  if (!app.pods || !app.pods.synced || !app.revisions || !app.revisions.synced) return false;
  return true;
}

function gridFlushed() {
  if (!perf.gridCompleteAt && viewSynced() && app.grid.cells.size === app.nodeNames.length && app.nodeNames.length) {
    const loading = app.grid.el.querySelector('.s-unknown');
    if (!loading) {
      perf.gridCompleteAt = performance.now();
      perf.gridCells = app.grid.cells.size;
      app.grid.el.dataset.complete = 'true';
    }
  }
}

function renderWantedCheck() {
  const ds = viewDS();
  const el = $('wanted-check');
  if (!ds || !ds.status) { el.hidden = true; return; }
  const wanted = app.wanted.size;
  const desired = ds.status.desiredNumberScheduled || 0;
  el.hidden = wanted === desired || ds.status.observedGeneration !== ds.metadata.generation;
  el.textContent = `The grid counts ${wanted} nodes that want a pod, the controller ${desired}: the view's placement check differs (legacy placement mode, or a rule it does not know).`;
}

const COUNTERS = [
  ['desiredNumberScheduled', 'desired'],
  ['currentNumberScheduled', 'current'],
  ['updatedNumberScheduled', 'updated'],
  ['numberReady', 'ready'],
  ['numberAvailable', 'available'],
  ['numberUnavailable', 'unavailable'],
  ['numberMisscheduled', 'misscheduled'],
];

function renderDS() {
  const ds = viewDS();
  if (!app.view || app.view.kind !== 'ds') return;
  if (!ds) return;
  $('ds-title').textContent = `DaemonSet ${ds.metadata.namespace}/${ds.metadata.name}`;
  const s = ds.status || {};
  const frag = document.createDocumentFragment();
  for (const [k, label] of COUNTERS) {
    const div = document.createElement('div');
    div.className = 'counter';
    div.dataset.counter = k;
    const v = document.createElement('strong');
    v.textContent = String(s[k] || 0);
    div.append(v, document.createTextNode(label));
    frag.appendChild(div);
  }
  $('counters').replaceChildren(frag);
  const gen = ds.metadata.generation;
  const obs = s.observedGeneration || 0;
  $('generation').textContent = `generation ${gen}, observed ${obs}${obs < gen ? ' (the controller has not seen the latest change yet)' : ''}`;
  $('generation').className = obs < gen ? 'behind' : '';
  const strat = ds.spec.updateStrategy || {};
  const ru = strat.rollingUpdate || {};
  $('strategy').textContent = `${strat.type || 'RollingUpdate'}${strat.type === 'OnDelete' ? '' : `, maxUnavailable ${ru.maxUnavailable ?? 1}, maxSurge ${ru.maxSurge ?? 0}`}, minReadySeconds ${ds.spec.minReadySeconds || 0}`;
  actions.fillDSForms(ds);
}

function renderOverviewTable(all) {
  const rows = all.map((d) => {
    const s = d.status || {};
    const tr = document.createElement('tr');
    const a = document.createElement('a');
    a.href = `#/ds/${d.metadata.namespace}/${d.metadata.name}`;
    a.textContent = `${d.metadata.namespace}/${d.metadata.name}`;
    const td = (v) => { const c = document.createElement('td'); c.append(v); return c; };
    const desired = s.desiredNumberScheduled || 0;
    const bar = document.createElement('div');
    bar.className = 'progress';
    const up = document.createElement('span');
    up.className = 'up';
    up.style.width = `${desired ? (100 * (s.updatedNumberScheduled || 0)) / desired : 0}%`;
    const av = document.createElement('span');
    av.className = 'av';
    av.style.width = `${desired ? (100 * (s.numberAvailable || 0)) / desired : 0}%`;
    bar.append(up, av);
    bar.setAttribute('aria-label', `${s.updatedNumberScheduled || 0} of ${desired} updated, ${s.numberAvailable || 0} available`);
    tr.append(td(a), ...COUNTERS.map(([k]) => td(String(s[k] || 0))),
      td(`${s.observedGeneration || 0}/${d.metadata.generation}`), td(bar));
    return tr;
  });
  $('ds-rows').replaceChildren(...rows);
  $('ds-empty').hidden = rows.length > 0;
}

function renderRevisions() {
  const ds = viewDS();
  if (!ds || !app.revisions || app.view.kind !== 'ds') return;
  const revs = [...app.revisions.items.values()].filter((r) => model.controllerUID(r) === ds.metadata.uid)
    .sort((a, b) => Number(b.revision) - Number(a.revision));
  const cur = model.currentRevision(ds, revs);
  const rows = revs.map((r) => {
    const tr = document.createElement('tr');
    const hash = (r.metadata.labels || {})[model.REVISION_HASH_LABEL] || '';
    const images = (((r.data || {}).spec || {}).template || {}).spec;
    const imgText = images ? (images.containers || []).map((c) => c.image).join(', ') : '';
    const td = (v) => { const c = document.createElement('td'); c.append(v); return c; };
    const isCur = cur && cur.name === r.metadata.name;
    tr.dataset.revision = String(r.revision);
    tr.dataset.hash = hash;
    let btn = document.createTextNode('current');
    if (!isCur) {
      btn = document.createElement('button');
      btn.textContent = `Roll back to ${r.revision}`;
      btn.addEventListener('click', () => actions.rollback(ds, r));
    }
    tr.append(td(String(r.revision)), td(hash), td(r.metadata.name), td(imgText), td(btn));
    if (isCur) tr.className = 'current';
    return tr;
  });
  $('revision-rows').replaceChildren(...rows);
}

function onSelect(name, selected) {
  app.selection = selected;
  $('selection').textContent = selected.length ? `${selected.length} selected` : 'none selected';
  $('node-actions').hidden = selected.length === 0;
  if (name) {
    app.detailNode = name;
    if (app.detailPods) app.detailPods.stop();
    app.detailPods = new Informer(app.client, '/api/v1/pods', { fieldSelector: `spec.nodeName=${name}` }, {
      onSync: renderNodeDetail, onEvent: renderNodeDetail, onError: informerError,
    }).start();
    renderNodeDetail();
  }
}

function kvList(obj) {
  const ul = document.createElement('ul');
  for (const [k, v] of Object.entries(obj || {}).sort()) {
    const li = document.createElement('li');
    li.textContent = v === '' ? k : `${k}=${v}`;
    ul.appendChild(li);
  }
  return ul;
}

function section(title, content) {
  const s = document.createElement('section');
  const h = document.createElement('h4');
  h.textContent = title;
  s.append(h, content);
  return s;
}

function renderNodeDetail() {
  const name = app.detailNode;
  const node = app.nodes && app.nodes.items.get(name);
  const el = $('node-detail');
  if (!node) { el.replaceChildren(document.createTextNode(name ? `${name}: gone` : 'Click a node.')); return; }
  const h = document.createElement('h3');
  h.textContent = node.metadata.name + (node.spec.unschedulable ? ' (cordoned)' : '');
  const taints = document.createElement('ul');
  for (const t of node.spec.taints || []) {
    const li = document.createElement('li');
    li.textContent = `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`;
    taints.appendChild(li);
  }
  const conds = document.createElement('table');
  for (const c of node.status.conditions || []) {
    const tr = document.createElement('tr');
    for (const v of [c.type, c.status, c.reason || '', c.lastHeartbeatTime ? new Date(c.lastHeartbeatTime).toLocaleTimeString() : '']) {
      const td = document.createElement('td');
      td.textContent = v;
      tr.appendChild(td);
    }
    if ((c.type === 'Ready') !== (c.status === 'True')) tr.className = 'bad';
    conds.appendChild(tr);
  }
  const cap = document.createElement('table');
  for (const k of Object.keys(node.status.capacity || {}).sort()) {
    const tr = document.createElement('tr');
    for (const v of [k, node.status.capacity[k], (node.status.allocatable || {})[k] || '']) {
      const td = document.createElement('td');
      td.textContent = v;
      tr.appendChild(td);
    }
    cap.appendChild(tr);
  }
  const pods = new Map();
  if (app.detailPods) for (const p of app.detailPods.items.values()) pods.set(podKey(p), p);
  for (const p of (app.podsByNode.get(name) || new Map()).values()) pods.set(podKey(p), p);
  const podList = document.createElement('table');
  podList.id = 'node-pods';
  for (const p of [...pods.values()].sort((a, b) => podKey(a).localeCompare(podKey(b)))) {
    const tr = document.createElement('tr');
    const st = model.podState(p, 0, Date.now());
    const ready = ((p.status.conditions || []).find((c) => c.type === 'Ready') || {}).status === 'True';
    for (const v of [podKey(p), p.metadata.deletionTimestamp ? 'Terminating' : p.status.phase || 'Pending', ready ? 'ready' : 'not ready',
      (p.metadata.labels || {})[model.REVISION_HASH_LABEL] || '', st.detail || '']) {
      const td = document.createElement('td');
      td.textContent = v;
      tr.appendChild(td);
    }
    podList.appendChild(tr);
  }
  const faults = {};
  const rest = {};
  for (const [k, v] of Object.entries(node.metadata.annotations || {})) (k.startsWith('stub.miniplane.io/') ? faults : rest)[k] = v;
  el.replaceChildren(h, section('Labels', kvList(node.metadata.labels)), section('Fault annotations', kvList(faults)),
    section('Taints', taints), section('Conditions', conds), section('Capacity / allocatable', cap), section('Pods', podList));
  el.dataset.node = name;
}

document.addEventListener('DOMContentLoaded', main);
