// What the page changes, each an ordinary API call as the signed-in user: the same patches
// kubectl set image, kubectl rollout undo, kubectl cordon, kubectl taint and kubectl annotate
// send.

let app = null;
let toast = () => {};
const $ = (id) => document.getElementById(id);

export const FAULTS = [
  { key: 'stub.miniplane.io/reject-pods', hint: 'reason, e.g. Rejected' },
  { key: 'stub.miniplane.io/fail-after', hint: 'duration, e.g. 30s' },
  { key: 'stub.miniplane.io/ready-delay', hint: 'duration, e.g. 5s' },
  { key: 'stub.miniplane.io/conditions', hint: 'e.g. MemoryPressure=True,DiskPressure=True' },
  { key: 'stub.miniplane.io/stop-heartbeats', hint: 'true' },
  { key: 'stub.miniplane.io/image-pull-failures', hint: 'e.g. :broken or *' },
  { key: 'stub.miniplane.io/fail-probes', hint: 'readiness, startup or both' },
];

const dsPath = (ds) => `/apis/apps/v1/namespaces/${encodeURIComponent(ds.metadata.namespace)}/daemonsets/${encodeURIComponent(ds.metadata.name)}`;
const nodePath = (name) => `/api/v1/nodes/${encodeURIComponent(name)}`;

export function install(a, t) {
  app = a;
  toast = t;
  const sel = $('fault-key');
  sel.replaceChildren(...FAULTS.map((f) => new Option(f.key.replace('stub.miniplane.io/', ''), f.key)));
  const hint = () => { $('fault-value').placeholder = FAULTS.find((f) => f.key === sel.value).hint; };
  sel.addEventListener('change', hint);
  hint();
  $('image-form').addEventListener('submit', (e) => { e.preventDefault(); setImage(); });
  $('strategy-form').addEventListener('submit', (e) => { e.preventDefault(); setStrategy(); });
  $('cordon').addEventListener('click', () => eachNode('cordon', () => ({ spec: { unschedulable: true } })));
  $('uncordon').addEventListener('click', () => eachNode('uncordon', () => ({ spec: { unschedulable: null } })));
  $('taint-form').addEventListener('submit', (e) => { e.preventDefault(); taint(true); });
  $('untaint').addEventListener('click', () => taint(false));
  $('fault-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const key = sel.value;
    const value = $('fault-value').value;
    eachNode(`annotate ${key}=${value}`, () => ({ metadata: { annotations: { [key]: value } } }));
  });
  $('fault-remove').addEventListener('click', () => {
    const key = sel.value;
    eachNode(`annotate ${key}-`, () => ({ metadata: { annotations: { [key]: null } } }));
  });
}

// fillDSForms shows the DaemonSet's current values in the forms the user is not editing.
export function fillDSForms(ds) {
  const containers = ds.spec.template.spec.containers || [];
  const pick = $('image-container');
  const names = containers.map((c) => c.name).join(',');
  if (pick.dataset.names !== names) {
    pick.replaceChildren(...containers.map((c) => new Option(c.name, c.name)));
    pick.dataset.names = names;
  }
  const c = containers.find((x) => x.name === pick.value) || containers[0];
  const img = $('image');
  if (c && document.activeElement !== img && img.dataset.ds !== `${ds.metadata.uid}/${ds.metadata.generation}`) {
    img.value = c.image;
    img.dataset.ds = `${ds.metadata.uid}/${ds.metadata.generation}`;
  }
  const ru = (ds.spec.updateStrategy || {}).rollingUpdate || {};
  for (const [id, v] of [['max-unavailable', ru.maxUnavailable ?? 1], ['max-surge', ru.maxSurge ?? 0]]) {
    const el = $(id);
    if (document.activeElement !== el && el.dataset.ds !== `${ds.metadata.uid}/${ds.metadata.generation}`) {
      el.value = String(v);
      el.dataset.ds = `${ds.metadata.uid}/${ds.metadata.generation}`;
    }
  }
}

function currentDS() {
  return app.dss.items.get(`${app.view.ns}/${app.view.name}`);
}

// setImage is kubectl set image: a strategic merge patch naming the container.
async function setImage() {
  const ds = currentDS();
  const name = $('image-container').value;
  const image = $('image').value.trim();
  try {
    await app.client.patch(dsPath(ds), { spec: { template: { spec: { containers: [{ name, image }] } } } }, 'strategic');
    toast(`image of ${name} set to ${image}: rolling update started`);
  } catch (err) {
    toast(`set image: ${err.message}`, true);
  }
}

// An IntOrString from a form field: "25%" stays a string, "2" becomes 2.
function intOrString(v) {
  const s = v.trim();
  return /^\d+$/.test(s) ? Number(s) : s;
}

async function setStrategy() {
  const ds = currentDS();
  const rollingUpdate = { maxUnavailable: intOrString($('max-unavailable').value), maxSurge: intOrString($('max-surge').value) };
  try {
    await app.client.patch(dsPath(ds), { spec: { updateStrategy: { type: 'RollingUpdate', rollingUpdate } } }, 'merge');
    toast(`maxUnavailable ${rollingUpdate.maxUnavailable}, maxSurge ${rollingUpdate.maxSurge}`);
  } catch (err) {
    toast(`update strategy: ${err.message}`, true);
  }
}

// rollback is kubectl rollout undo --to-revision: the revision's data is a strategic merge
// patch that replaces the template, applied to the DaemonSet.
export async function rollback(ds, rev) {
  try {
    await app.client.patch(dsPath(ds), rev.data, 'strategic');
    toast(`rolled back to revision ${rev.revision}`);
  } catch (err) {
    toast(`roll back: ${err.message}`, true);
  }
}

// eachNode sends patch(node) as a merge patch to every selected node, a few at a time.
async function eachNode(what, patch) {
  const names = [...app.selection];
  if (!names.length) return;
  let failed = 0;
  let firstErr = '';
  const queue = [...names];
  const worker = async () => {
    while (queue.length) {
      const name = queue.shift();
      const node = app.nodes.items.get(name);
      try {
        await app.client.patch(nodePath(name), patch(node), 'merge');
      } catch (err) {
        failed++;
        if (!firstErr) firstErr = `${name}: ${err.message}`;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(16, names.length) }, worker));
  const target = names.length === 1 ? names[0] : `${names.length} nodes`;
  if (failed) toast(`${what} on ${target}: ${failed} failed (${firstErr})`, true);
  else toast(`${what} on ${target}`);
}

// taint adds key=value:effect (replacing the same key and effect) or removes every taint with
// the key, as kubectl taint. Taints are a list without a merge key, so the whole list is
// written, guarded by the node's resourceVersion; a conflict is retried on a fresh read.
async function taint(add) {
  const key = $('taint-key').value.trim();
  const value = $('taint-value').value.trim();
  const effect = $('taint-effect').value;
  if (!key) { toast('taint: a key is needed', true); return; }
  const names = [...app.selection];
  let failed = 0;
  let firstErr = '';
  await Promise.all(names.map(async (name) => {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        const node = attempt === 0 ? app.nodes.items.get(name) : await app.client.get(nodePath(name));
        let taints = (node.spec.taints || []).filter((t) => (add ? !(t.key === key && t.effect === effect) : t.key !== key));
        if (add) taints = [...taints, value ? { key, value, effect } : { key, effect }];
        await app.client.patch(nodePath(name), { metadata: { resourceVersion: node.metadata.resourceVersion }, spec: { taints } }, 'merge');
        return;
      } catch (err) {
        if (err.code === 409 && attempt < 2) continue;
        failed++;
        if (!firstErr) firstErr = `${name}: ${err.message}`;
        return;
      }
    }
  }));
  const what = add ? `taint ${key}${value ? `=${value}` : ''}:${effect}` : `taint ${key}-`;
  const target = names.length === 1 ? names[0] : `${names.length} nodes`;
  if (failed) toast(`${what} on ${target}: ${failed} failed (${firstErr})`, true);
  else toast(`${what} on ${target}`);
}
