// Pure functions: what a DaemonSet wants on a node, what state its pods are in, which
// revision is current. No DOM, no network; the Go tests call them in a real browser.

// Cell states, from "nothing to do" to "done"; a cell's colour is its state.
export const STATES = ['none', 'missing', 'pending', 'running', 'ready', 'available', 'failed', 'terminating'];

export const STATE_LABELS = {
  none: 'no pod wanted',
  missing: 'not yet created',
  pending: 'Pending',
  running: 'Running, not Ready',
  ready: 'Ready, not yet available',
  available: 'Available',
  failed: 'Failed',
  terminating: 'Terminating',
};

// How urgent a state is when several DaemonSets share a node in the overview: the cell
// shows the most urgent one.
const URGENCY = { failed: 7, terminating: 6, pending: 5, missing: 4, running: 3, ready: 2, available: 1, none: 0 };

export const REVISION_HASH_LABEL = 'controller-revision-hash';

// The tolerations the DaemonSet controller adds to every daemon pod
// (docs/daemonset-controller.md#tolerations).
export function daemonTolerations(podSpec) {
  const auto = [
    { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute' },
    { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute' },
    { key: 'node.kubernetes.io/disk-pressure', operator: 'Exists', effect: 'NoSchedule' },
    { key: 'node.kubernetes.io/memory-pressure', operator: 'Exists', effect: 'NoSchedule' },
    { key: 'node.kubernetes.io/pid-pressure', operator: 'Exists', effect: 'NoSchedule' },
    { key: 'node.kubernetes.io/unschedulable', operator: 'Exists', effect: 'NoSchedule' },
  ];
  if (podSpec && podSpec.hostNetwork) {
    auto.push({ key: 'node.kubernetes.io/network-unavailable', operator: 'Exists', effect: 'NoSchedule' });
  }
  return [...((podSpec && podSpec.tolerations) || []), ...auto];
}

// Kubernetes' Toleration.ToleratesTaint.
export function tolerates(tol, taint) {
  if (tol.effect && tol.effect !== taint.effect) return false;
  if (tol.key && tol.key !== taint.key) return false;
  const op = tol.operator || 'Equal';
  if (op === 'Exists') return true;
  if (op === 'Equal') return (tol.value || '') === (taint.value || '');
  return false;
}

// The first taint with one of effects that no toleration tolerates, or null.
export function untoleratedTaint(tolerations, taints, effects) {
  for (const t of taints || []) {
    if (effects && !effects.includes(t.effect)) continue;
    if (!tolerations.some((tol) => tolerates(tol, t))) return t;
  }
  return null;
}

function requirementMatches(req, value, present) {
  const values = req.values || [];
  switch (req.operator) {
    case 'In': return present && values.includes(value);
    case 'NotIn': return !present || !values.includes(value);
    case 'Exists': return present;
    case 'DoesNotExist': return !present;
    case 'Gt':
    case 'Lt': {
      if (!present || values.length !== 1) return false;
      const have = Number.parseInt(value, 10);
      const want = Number.parseInt(values[0], 10);
      if (!Number.isFinite(have) || !Number.isFinite(want) || String(have) !== value.trim()) return false;
      return req.operator === 'Gt' ? have > want : have < want;
    }
    default: return false;
  }
}

// A node selector term matches when all its requirements do; an empty term matches nothing,
// as in Kubernetes.
function termMatches(term, node) {
  const exprs = term.matchExpressions || [];
  const fields = term.matchFields || [];
  if (exprs.length === 0 && fields.length === 0) return false;
  const labels = node.metadata.labels || {};
  for (const e of exprs) {
    if (!requirementMatches(e, labels[e.key], Object.hasOwn(labels, e.key))) return false;
  }
  for (const f of fields) {
    if (f.key !== 'metadata.name') return false;
    if (!requirementMatches(f, node.metadata.name, true)) return false;
  }
  return true;
}

// Whether node satisfies a pod spec's nodeSelector and required node affinity.
export function matchesNodeAffinity(podSpec, node) {
  const labels = node.metadata.labels || {};
  for (const [k, v] of Object.entries(podSpec.nodeSelector || {})) {
    if (labels[k] !== v) return false;
  }
  const required = podSpec.affinity && podSpec.affinity.nodeAffinity &&
    podSpec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution;
  if (!required) return true;
  return (required.nodeSelectorTerms || []).some((t) => termMatches(t, node));
}

// The DaemonSet controller's placement decision in its current mode
// (docs/daemonset-controller.md#placement-current): nodeName, selector and affinity, and
// NoSchedule/NoExecute taints against the template's tolerations plus the automatic ones.
// wanted: the node should run a daemon pod; continueRunning: a pod already there may stay.
export function shouldRun(ds, node) {
  const spec = ds.spec.template.spec || {};
  if (spec.nodeName && spec.nodeName !== node.metadata.name) return { wanted: false, continueRunning: false };
  if (!matchesNodeAffinity(spec, node)) return { wanted: false, continueRunning: false };
  const tols = daemonTolerations(spec);
  if (untoleratedTaint(tols, node.spec && node.spec.taints, ['NoSchedule', 'NoExecute'])) {
    const noExecute = untoleratedTaint(tols, node.spec && node.spec.taints, ['NoExecute']);
    return { wanted: false, continueRunning: !noExecute };
  }
  return { wanted: true, continueRunning: true };
}

// The node a pod is on or meant for: its spec.nodeName once bound, before that the node
// the DaemonSet controller pinned it to with a required matchFields term on metadata.name.
export function nodeOfPod(pod) {
  if (pod.spec && pod.spec.nodeName) return pod.spec.nodeName;
  const req = pod.spec && pod.spec.affinity && pod.spec.affinity.nodeAffinity &&
    pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution;
  for (const term of (req && req.nodeSelectorTerms) || []) {
    for (const f of term.matchFields || []) {
      if (f.key === 'metadata.name' && f.operator === 'In' && (f.values || []).length === 1) return f.values[0];
    }
  }
  return '';
}

// A label selector in the query form of labelSelector=.
export function selectorString(sel) {
  if (!sel) return '';
  const parts = [];
  for (const [k, v] of Object.entries(sel.matchLabels || {})) parts.push(`${k}=${v}`);
  for (const e of sel.matchExpressions || []) {
    const vals = (e.values || []).join(',');
    switch (e.operator) {
      case 'In': parts.push(`${e.key} in (${vals})`); break;
      case 'NotIn': parts.push(`${e.key} notin (${vals})`); break;
      case 'Exists': parts.push(e.key); break;
      case 'DoesNotExist': parts.push(`!${e.key}`); break;
      default: break;
    }
  }
  return parts.join(',');
}

export function controllerUID(obj) {
  for (const ref of (obj.metadata && obj.metadata.ownerReferences) || []) {
    if (ref.controller) return ref.uid;
  }
  return '';
}

// The DaemonSet's current ControllerRevision: the one it controls with the highest
// revision number (the controller gives the current template the highest number, also on a
// rollback, which renumbers the old revision).
export function currentRevision(ds, revisions) {
  let best = null;
  for (const r of revisions) {
    if (controllerUID(r) !== ds.metadata.uid) continue;
    if (!best || Number(r.revision) > Number(best.revision)) best = r;
  }
  if (!best) return null;
  return {
    name: best.metadata.name,
    revision: Number(best.revision),
    hash: (best.metadata.labels || {})[REVISION_HASH_LABEL] || '',
  };
}

function readyCondition(pod) {
  return ((pod.status && pod.status.conditions) || []).find((c) => c.type === 'Ready');
}

// Why a pending pod waits, as kubectl get pods shows it (ErrImagePull, ContainerCreating).
function waitingReason(pod) {
  const st = pod.status || {};
  for (const cs of [...(st.initContainerStatuses || []), ...(st.containerStatuses || [])]) {
    if (cs.state && cs.state.waiting && cs.state.waiting.reason) return cs.state.waiting.reason;
  }
  if (!pod.spec.nodeName) return 'not scheduled';
  return '';
}

// The state of one pod at time now (ms since the epoch), with detail for the accessible
// text and, for a pod Ready but not yet available, the time it turns available.
export function podState(pod, minReadySeconds, now) {
  const phase = (pod.status && pod.status.phase) || 'Pending';
  if (pod.metadata.deletionTimestamp) return { state: 'terminating', detail: phase };
  if (phase === 'Failed') return { state: 'failed', detail: (pod.status.reason || pod.status.message || '').slice(0, 80) };
  if (phase === 'Succeeded') return { state: 'failed', detail: 'Succeeded (daemon pods must not exit)' };
  if (phase === 'Running') {
    const ready = readyCondition(pod);
    if (!ready || ready.status !== 'True') return { state: 'running', detail: '' };
    if (!minReadySeconds) return { state: 'available', detail: '' };
    const since = Date.parse(ready.lastTransitionTime || '');
    if (Number.isNaN(since)) return { state: 'ready', detail: '' };
    // Available once Ready for more than minReadySeconds (docs/daemonset-controller.md#availability).
    const due = since + minReadySeconds * 1000;
    if (due < now) return { state: 'available', detail: '' };
    return { state: 'ready', detail: '', availableAt: due + 1 };
  }
  return { state: 'pending', detail: waitingReason(pod) };
}

// One grid cell: the node's daemon pods of ds (those it controls on that node) summarised.
// pods may hold an old and a new pod at once during a surge rollout.
export function cellFor(ds, node, pods, currentHash, now) {
  const name = node.metadata.name;
  const place = shouldRun(ds, node);
  const minReady = ds.spec.minReadySeconds || 0;
  const entries = pods.map((p) => {
    const s = podState(p, minReady, now);
    const hash = (p.metadata.labels || {})[REVISION_HASH_LABEL] || '';
    return { ...s, rev: currentHash && hash === currentHash ? 'new' : 'old', pod: p.metadata.name };
  });
  // The new pod first, then the rest by urgency: the cell shows the pod that will stay.
  entries.sort((a, b) => (a.rev === b.rev ? URGENCY[b.state] - URGENCY[a.state] : (a.rev === 'new' ? -1 : 1)));
  let availableAt = 0;
  for (const e of entries) {
    if (e.availableAt && (!availableAt || e.availableAt < availableAt)) availableAt = e.availableAt;
  }
  const cell = {
    node: name,
    wanted: place.wanted,
    state: entries.length ? entries[0].state : (place.wanted ? 'missing' : 'none'),
    rev: entries.length ? entries[0].rev : '',
    second: entries.length > 1 ? { state: entries[1].state, rev: entries[1].rev } : null,
    misscheduled: entries.length > 0 && !place.wanted,
    pods: entries.length,
    availableAt,
  };
  cell.text = cellText(cell, entries);
  return cell;
}

function describe(e) {
  return `${STATE_LABELS[e.state]}${e.detail ? ` (${e.detail})` : ''}, ${e.rev} revision, pod ${e.pod}`;
}

function cellText(cell, entries) {
  if (!entries.length) return `${cell.node}: ${STATE_LABELS[cell.state]}`;
  let t = `${cell.node}: ${entries.map(describe).join('; ')}`;
  if (entries.length > 1) t += ` (${entries.length} pods: surge)`;
  if (cell.misscheduled) t += '; misscheduled: the node should not run it';
  return t;
}

// The overview's cell for one node across every DaemonSet: the most urgent state among the
// DaemonSets that want the node or have pods there, old when any of their pods there is old.
export function overviewCell(node, perDS) {
  const name = node.metadata.name;
  let best = null;
  let old = false;
  let misscheduled = false;
  const parts = [];
  for (const { ds, cell } of perDS) {
    if (cell.state === 'none') continue;
    if (cell.rev === 'old' || (cell.second && cell.second.rev === 'old')) old = true;
    if (cell.misscheduled) misscheduled = true;
    if (!best || URGENCY[cell.state] > URGENCY[best.state]) best = cell;
    parts.push(`${ds.metadata.namespace}/${ds.metadata.name} ${STATE_LABELS[cell.state]}${cell.rev ? ` (${cell.rev})` : ''}`);
  }
  const state = best ? best.state : 'none';
  return {
    node: name, state, rev: best && best.rev ? (old ? 'old' : 'new') : '', second: null, misscheduled,
    text: parts.length ? `${name}: ${parts.join('; ')}` : `${name}: no daemon pod wanted`,
  };
}

// Natural order of node names: stub-node-2 before stub-node-10.
export const nodeOrder = new Intl.Collator('en', { numeric: true }).compare;
