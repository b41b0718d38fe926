// The page's Kubernetes client: every call goes to /ui/proxy/…, which the server hands to
// the API as the signed-in user, with the session's CSRF token in a header. Informer is a
// small list-then-watch cache over the API's own watch stream.

const PROXY = '/ui/proxy';

export class APIError extends Error {
  constructor(code, message, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

export class Client {
  constructor(csrf, onUnauthorized) {
    this.csrf = csrf;
    this.onUnauthorized = onUnauthorized;
  }

  headers(extra) {
    return { 'X-CSRF-Token': this.csrf, Accept: 'application/json', ...extra };
  }

  async request(method, path, body, contentType) {
    const init = { method, headers: this.headers(body ? { 'Content-Type': contentType || 'application/json' } : {}), credentials: 'same-origin' };
    if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
    const res = await fetch(PROXY + path, init);
    return this.decode(res);
  }

  async decode(res) {
    if (res.status === 401) this.onUnauthorized();
    const text = await res.text();
    let obj = null;
    try { obj = text ? JSON.parse(text) : null; } catch { obj = null; }
    if (!res.ok) {
      throw new APIError(res.status, (obj && obj.message) || `${res.status} ${res.statusText}`, obj);
    }
    return obj;
  }

  get(path) { return this.request('GET', path); }

  // kind: 'merge' (JSON merge patch) or 'strategic' (strategic merge patch, as kubectl).
  patch(path, body, kind) {
    const ct = kind === 'strategic' ? 'application/strategic-merge-patch+json' : 'application/merge-patch+json';
    return this.request('PATCH', path, body, ct);
  }

  // watch opens a watch stream and calls onEvent for each event until the stream ends;
  // it resolves when the server closes it and rejects on network errors.
  async watch(path, params, signal, onEvent) {
    const q = new URLSearchParams(params);
    q.set('watch', 'true');
    q.set('allowWatchBookmarks', 'true');
    const res = await fetch(`${PROXY}${path}?${q}`, { headers: this.headers(), credentials: 'same-origin', signal });
    if (!res.ok) await this.decode(res);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.trim()) onEvent(JSON.parse(line));
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }
}

const key = (o) => (o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name);

// Informer lists path, then follows its watch from the list's resourceVersion, keeping items
// by namespace/name. A watch that ends is resumed from the last resourceVersion seen; one
// the server says is too old (410 Expired) is replaced by a fresh list. handlers:
// onSync(items) after each list, onEvent(type, obj, old) for each change.
export class Informer {
  constructor(client, path, params, handlers) {
    this.client = client;
    this.path = path;
    this.params = params || {};
    this.handlers = handlers;
    this.items = new Map();
    this.synced = false;
    this.abort = new AbortController();
    this.rv = '';
  }

  start() {
    this.run();
    return this;
  }

  stop() {
    this.abort.abort();
  }

  async run() {
    let delay = 500;
    while (!this.abort.signal.aborted) {
      try {
        if (!this.rv) await this.list();
        await this.client.watch(this.path, { ...this.params, resourceVersion: this.rv }, this.abort.signal, (ev) => this.onWatchEvent(ev));
        delay = 500;
      } catch (err) {
        if (this.abort.signal.aborted) return;
        if (err instanceof APIError && (err.code === 401 || err.code === 403)) {
          if (this.handlers.onError) this.handlers.onError(err);
          return;
        }
        if (this.handlers.onError) this.handlers.onError(err);
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 10000);
      }
    }
  }

  async list() {
    const q = new URLSearchParams(this.params);
    const qs = q.toString();
    const list = await this.client.get(this.path + (qs ? `?${qs}` : ''));
    if (this.abort.signal.aborted) return;
    this.items = new Map();
    for (const item of list.items || []) this.items.set(key(item), item);
    this.rv = list.metadata.resourceVersion;
    this.synced = true;
    this.handlers.onSync(this.items);
  }

  onWatchEvent(ev) {
    if (this.abort.signal.aborted) return;
    const obj = ev.object;
    switch (ev.type) {
      case 'ADDED':
      case 'MODIFIED': {
        const k = key(obj);
        const old = this.items.get(k);
        this.items.set(k, obj);
        this.rv = obj.metadata.resourceVersion;
        this.handlers.onEvent(ev.type, obj, old);
        break;
      }
      case 'DELETED': {
        const k = key(obj);
        const old = this.items.get(k);
        this.items.delete(k);
        this.rv = obj.metadata.resourceVersion;
        this.handlers.onEvent(ev.type, obj, old);
        break;
      }
      case 'BOOKMARK':
        this.rv = obj.metadata.resourceVersion;
        break;
      case 'ERROR':
        // 410 Expired: the watch cannot resume from here; list again.
        this.rv = '';
        throw new APIError(obj.code || 500, obj.message || 'watch error', obj);
      default:
        break;
    }
  }
}
