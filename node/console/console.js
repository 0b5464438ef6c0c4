// The Tenure web console: a client of this node's HTTP/JSON gateway (/v1/...), nothing more.
// The token the user gives is kept in this tab's sessionStorage and sent as a bearer token on
// every call; the API decides what it may see and do. Every value from the API is written as
// text, never as markup.

const TOKEN_KEY = "tenure.console.token";
const main = document.getElementById("main");

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  admin: false,
  signedIn: false,
  // Ends what the page on screen runs (timers, watch streams) when another replaces it.
  page: new AbortController(),
};

// ---------------------------------------------------------------------------------------
// The API

class ApiError extends Error {
  constructor(status, body) {
    super(body.message || `HTTP ${status}`);
    this.status = status;
    this.code = body.code || "";
    this.reason = body.reason || "";
  }
  toString() {
    return this.reason ? `${this.reason}: ${this.message}` : this.message;
  }
}

function headers(extra = {}) {
  const h = { ...extra };
  if (state.token) h.authorization = `Bearer ${state.token}`;
  return h;
}

async function api(method, path, body, signal) {
  const init = { method, headers: headers(), cache: "no-store", signal };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let json = {};
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    json = { message: text };
  }
  if (!response.ok) {
    const error = new ApiError(response.status, json);
    if (error.status === 401) signedOut(error);
    throw error;
  }
  return json;
}

// A token the node stopped accepting (revoked, or the file changed) ends the sign-in: nothing
// keeps calling with it.
function signedOut(error) {
  if (!state.signedIn) return;
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  loginPage(`The node no longer accepts the token (${error}): sign in again.`);
}

const enc = encodeURIComponent;

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}

// Server-Sent Events from /v1/watch, read with fetch so the token rides in a header (an
// EventSource cannot send one). Resumes a dropped stream from the last revision seen, backing
// off while the node refuses; when that revision is no longer kept it goes on with what is
// live and calls `onReset` (the page reads again what it shows). A refusal that a retry cannot
// mend (a bad request, no permission) stops it.
async function watch(params, onMessage, signal, onReset = () => {}) {
  let last = null;
  let pause = 1000;
  while (!signal.aborted) {
    try {
      const h = headers({ accept: "text/event-stream" });
      if (last !== null) h["last-event-id"] = last;
      const response = await fetch(`/v1/watch${query(params)}`, { headers: h, signal, cache: "no-store" });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        const retryAfter = Number(response.headers.get("retry-after"));
        if (retryAfter > 0) pause = Math.max(pause, retryAfter * 1000);
        throw new ApiError(response.status, body);
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const event = { type: "message", id: null, data: "" };
          for (const line of block.split("\n")) {
            const colon = line.indexOf(":");
            if (colon === 0) continue;
            const field = colon < 0 ? line : line.slice(0, colon);
            const v = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
            if (field === "event") event.type = v;
            else if (field === "id") event.id = v;
            else if (field === "data") event.data += (event.data ? "\n" : "") + v;
          }
          if (!event.data) continue;
          const body = JSON.parse(event.data);
          if (event.type === "error") throw new ApiError(0, body);
          if (event.id !== null) last = event.id;
          pause = 1000;
          onMessage(body);
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError) {
        if (e.reason === "compacted") {
          // What was missed is gone from the log's history: go on from now.
          last = null;
          params = { ...params, startRevision: 0, liveOnly: true };
          onReset();
        } else if (e.status === 401) {
          signedOut(e);
          return;
        } else if (e.status >= 400 && e.status < 500 && e.status !== 408 && e.status !== 429) {
          notify(`The live view stopped: ${e}`);
          return;
        }
      }
    }
    await sleep(pause, signal);
    pause = Math.min(pause * 2, 30000);
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

// ---------------------------------------------------------------------------------------
// Building the page (text only)

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "onclick" || k === "onsubmit" || k === "oninput") node.addEventListener(k.slice(2), v);
    else if (/^on/i.test(k)) throw new Error(`no handler attribute: ${k}`);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (/^on/i.test(k)) throw new Error(`no handler attribute: ${k}`);
    if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A table of `rows`, one cell per column; `rowAttrs(row)` gives a row's own attributes (never
// taken from the row's data).
function table(columns, rows, empty, attrs = {}, rowAttrs = () => ({})) {
  if (!rows.length) return el("p", { class: "quiet", ...attrs }, empty);
  return el("table", attrs,
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { class: c.num ? "num" : null }, c.title)))),
    el("tbody", {}, rows.map((row) => el("tr", rowAttrs(row),
      columns.map((c) => el("td", { class: c.num ? "num" : c.mono ? "mono" : null }, c.cell(row)))))));
}

function notify(message, info = false) {
  const notice = document.getElementById("notice");
  notice.textContent = message;
  notice.className = info ? "info" : "";
  notice.hidden = !message;
}

function show(...children) {
  main.replaceChildren(...children.flat(Infinity).filter((child) => child !== null && child !== undefined && child !== false));
}

const modeName = (m) => (m || "LEASE_MODE_EXCLUSIVE").replace("LEASE_MODE_", "").replace("UNSPECIFIED", "EXCLUSIVE").toLowerCase();
const statusName = (s) => (s || "").replace(/^[A-Z]+_STATUS_/, "").toLowerCase();
const eventName = (e) => (e || "").replace("EVENT_TYPE_", "").toLowerCase().replace(/_/g, " ");
const seconds = (d) => (d ? parseFloat(d) : 0);

function when(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? ts : d.toLocaleString();
}

function duration(s) {
  if (s <= 0) return "0 s";
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

function resourceLink(name) {
  return el("a", { href: `#/resource/${enc(name)}` }, name);
}

// A confirmation before an action, with the fields it needs; resolves to their values, or
// null when the user cancels.
function confirmAction(title, text, fields = []) {
  const dialog = document.getElementById("confirm");
  if (dialog.open) return Promise.resolve(null);
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  const box = document.getElementById("confirm-fields");
  const inputs = fields.map((f) => {
    const input = f.type === "checkbox"
      ? el("input", { type: "checkbox", name: f.name, checked: f.value ? true : null })
      : el("input", { name: f.name, value: f.value ?? "", placeholder: f.placeholder, required: f.required });
    return { f, input, label: el("label", {}, f.label, input) };
  });
  box.replaceChildren(...inputs.map((i) => i.label));
  dialog.returnValue = "";
  // Confirm takes no click for a moment: a click meant for what was under the dialog (or one
  // another window timed) does not confirm.
  const ok = document.getElementById("confirm-ok");
  ok.disabled = true;
  setTimeout(() => { ok.disabled = false; }, 500);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      if (dialog.returnValue !== "ok") return resolve(null);
      const values = {};
      for (const { f, input } of inputs) values[f.name] = f.type === "checkbox" ? input.checked : input.value.trim();
      resolve(values);
    }, { once: true });
    dialog.showModal();
  });
}

async function act(what, call) {
  try {
    const reply = await call();
    if (reply && reply.cancelled === false) {
      notify(`${what}: it was no longer waiting.`, true);
      return false;
    }
    notify(`${what}: done.`, true);
    return true;
  } catch (e) {
    notify(`${what} was refused: ${e}`);
    return false;
  }
}

// ---------------------------------------------------------------------------------------
// Signing in

async function signIn() {
  try {
    await api("GET", `/v1/resources${query({ pageSize: 1 })}`);
  } catch (e) {
    if (e.status === 401) return false;
    throw e;
  }
  try {
    await api("GET", "/v1/cluster");
    state.admin = true;
  } catch (e) {
    if (e.status !== 403) throw e;
    state.admin = false;
  }
  document.getElementById("who").textContent = state.token ? (state.admin ? "admin token" : "client token") : "auth off";
  document.getElementById("nav").hidden = false;
  document.getElementById("signout").hidden = !state.token;
  state.signedIn = true;
  return true;
}

function loginPage(message) {
  state.signedIn = false;
  state.page.abort();
  document.getElementById("nav").hidden = true;
  document.getElementById("signout").hidden = true;
  document.getElementById("who").textContent = "";
  const input = el("input", { id: "token", type: "password", autocomplete: "off", required: true, placeholder: "a token of this cluster's token file" });
  const error = el("p", { class: "quiet", id: "login-error" }, message || "");
  show(el("div", { class: "login card" },
    el("h1", {}, "Sign in"),
    el("p", { class: "quiet" }, "The token is kept for this browser tab only."),
    el("form", {
      onsubmit: async (event) => {
        event.preventDefault();
        state.token = input.value.trim();
        try {
          if (await signIn()) {
            sessionStorage.setItem(TOKEN_KEY, state.token);
            route();
          } else {
            state.token = null;
            error.textContent = "This cluster does not know that token (unauthenticated).";
          }
        } catch (e) {
          state.token = null;
          error.textContent = `The node refused: ${e}`;
        }
      },
    }, el("label", {}, "Token", input), el("p", {}, el("button", { class: "primary", type: "submit", id: "sign-in" }, "Sign in")), error)));
  input.focus();
}

document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.admin = false;
  state.page.abort();
  notify("");
  loginPage("Signed out.");
});

// ---------------------------------------------------------------------------------------
// Cluster

async function clusterPage(signal) {
  const render = async () => {
    let status;
    try {
      status = await api("GET", "/v1/cluster", undefined, signal);
    } catch (e) {
      if (signal.aborted) return false;
      show(el("h1", {}, "Cluster"), el("p", { class: "card", id: "cluster-refused" }, `The cluster's status was refused: ${e}`));
      // A refusal for the token's role does not change by asking again.
      return !(e instanceof ApiError && (e.status === 401 || e.status === 403));
    }
    const storage = status.storage || {};
    const stat = (label, value, id) => el("div", { class: "stat" }, el("b", { id }, value), el("span", {}, label));
    const leader = status.leaderId === "0" ? "unknown" : `node ${status.leaderId} (${status.leaderAddr})`;
    show(
      el("h1", {}, `Cluster — node ${status.id}, ${status.state}`),
      el("div", { class: "grid" },
        stat("leader", leader, "leader"),
        stat("term", status.term, "term"),
        stat("last log index", status.lastLogIndex),
        stat("commit index", status.commitIndex),
        stat("applied index", status.appliedIndex, "applied"),
        stat("live leases", status.activeLeases),
        stat("log appends", storage.logAppends),
        stat("log entries written", storage.logEntries),
        stat("fsyncs", storage.logFsyncs, "fsyncs"),
        stat("fsync time", `${(Number(storage.logSyncMicros || 0) / 1000).toFixed(1)} ms`),
        stat("snapshots built", storage.snapshotsBuilt),
        stat("last snapshot index", storage.lastSnapshotIndex)),
      el("h2", {}, "Members"),
      table([
        { title: "node", cell: (m) => m.id },
        { title: "address", mono: true, cell: (m) => m.addr },
        { title: "role", cell: (m) => (m.id === status.leaderId ? "leader" : m.voter ? "voter" : "learner") },
        { title: "matched index", num: true, cell: (m) => m.matchedIndex },
        { title: "health", cell: (m) => el("span", { class: `pill ${m.healthy ? "ok" : "bad"}` }, m.healthy ? "healthy" : "unreachable") },
      ], status.members || [], "No members.", { id: "members" }),
      status.configMismatches?.length
        ? [el("h2", {}, "Peers refused for their configuration"), el("ul", {}, status.configMismatches.map((m) => el("li", {}, m)))]
        : null,
      el("p", { class: "quiet" }, `As node ${status.id} sees it; refreshed every 2 s.`));
    return true;
  };
  while (!signal.aborted && (await render())) await sleep(2000, signal);
}

// ---------------------------------------------------------------------------------------
// Resources

async function resourcesPage(signal, params) {
  const prefix = params.get("prefix") || "";
  const tokens = (params.get("pages") || "").split(",").filter(Boolean);
  const here = (next) => {
    const q = new URLSearchParams();
    if (prefix) q.set("prefix", prefix);
    if (next.length) q.set("pages", next.join(","));
    const s = q.toString();
    return `#/resources${s ? `?${s}` : ""}`;
  };
  const search = el("input", { name: "prefix", value: prefix, placeholder: "db/", id: "prefix" });
  const form = el("form", {
    class: "inline",
    onsubmit: (event) => {
      event.preventDefault();
      location.hash = `#/resources${query({ prefix: search.value.trim() })}`;
    },
  }, el("label", {}, "Name prefix", search), el("button", { type: "submit" }, "Search"),
  state.admin ? el("button", { type: "button", class: "primary", id: "create-resource", onclick: createResource }, "Create resource") : null);
  const list = el("div", { id: "resource-list" });
  show(el("h1", {}, "Resources"), form, list);

  const load = async () => {
    let page;
    try {
      page = await api("GET", `/v1/resources${query({ prefix, pageSize: 50, pageToken: tokens[tokens.length - 1] })}`, undefined, signal);
    } catch (e) {
      if (!signal.aborted) list.replaceChildren(el("p", { class: "card" }, `Listing was refused: ${e}`));
      return;
    }
    list.replaceChildren(
      table([
        { title: "name", cell: (r) => resourceLink(r.name) },
        { title: "kind", cell: (r) => r.kind || (r.adHoc ? "ad hoc" : "") },
        { title: "holders", num: true, cell: (r) => r.leaseCount },
        { title: "waiting", num: true, cell: (r) => r.waiting },
        { title: "units in use", num: true, cell: (r) => (r.policy && r.policy.totalUnits !== "0" ? `${r.unitsInUse} / ${r.policy.totalUnits}` : r.unitsInUse) },
        { title: "revision", num: true, cell: (r) => r.revision },
      ], page.resources || [], prefix ? `No resource named ${prefix}…` : "No resources yet.", {},
      (r) => ({ "data-resource": r.name })),
      el("div", { class: "pager" },
        tokens.length ? el("a", { href: here(tokens.slice(0, -1)) }, "← Previous page") : null,
        page.nextPageToken ? el("a", { href: here([...tokens, page.nextPageToken]), id: "next-page" }, "Next page →") : null));
  };
  await load();
  // Live: a watch of the prefix wakes the list (a watch of every resource needs an admin).
  if (prefix || state.admin) {
    let pending = false;
    watch({ prefix, startRevision: 0, liveOnly: true }, (message) => {
      if (!message.events?.length || pending) return;
      pending = true;
      setTimeout(() => { pending = false; load(); }, 100);
    }, signal, load);
  } else {
    while (!signal.aborted) {
      await sleep(2000, signal);
      if (!signal.aborted) await load();
    }
  }
}

async function createResource() {
  const values = await confirmAction("Create a resource", "Registers a resource with its policy.", [
    { name: "name", label: "Name", required: true, placeholder: "db/primary" },
    { name: "kind", label: "Kind", placeholder: "database" },
    { name: "displayName", label: "Display name" },
    { name: "defaultTtl", label: "Default ttl", value: "30s" },
    { name: "maxTtl", label: "Longest ttl", value: "300s" },
    { name: "transferable", label: "Transferable", type: "checkbox", value: true },
  ]);
  if (!values) return;
  const policy = { transferable: values.transferable };
  if (values.defaultTtl) policy.defaultTtl = values.defaultTtl;
  if (values.maxTtl) policy.maxTtl = values.maxTtl;
  const body = { name: values.name, kind: values.kind, displayName: values.displayName, policy, requestId: crypto.randomUUID() };
  if (await act(`Creating ${values.name}`, () => api("POST", "/v1/resources", body))) location.hash = `#/resource/${enc(values.name)}`;
}

// ---------------------------------------------------------------------------------------
// One resource: policy, holders, waiting room, bookings, and the history timeline

const SPANS = [["auto", 0], ["5 min", 300], ["1 h", 3600], ["24 h", 86400]];

async function resourcePage(signal, name) {
  const view = {
    resource: null,
    fetchedAt: 0,
    entries: new Map(), // "revision/seq" -> HistoryEntry
    span: 0,
  };
  const head = el("div");
  const holders = el("div", { id: "holders" });
  const waiters = el("div", { id: "waiters" });
  const bookings = el("div", { id: "bookings" });
  const policy = el("div", { id: "policy" });
  const timeline = el("div", { class: "timeline", id: "timeline" });
  const events = el("div", { id: "events" });
  const spans = el("span", { class: "spans" }, SPANS.map(([label, s]) =>
    el("button", { type: "button", class: "small", "aria-pressed": String(s === view.span), onclick: (e) => {
      view.span = s;
      for (const b of spans.children) b.setAttribute("aria-pressed", "false");
      e.currentTarget.setAttribute("aria-pressed", "true");
      drawTimeline();
    } }, label)));
  show(head,
    el("h2", {}, "Holders"), holders,
    el("h2", {}, "Waiting room"), waiters,
    el("h2", {}, "History", spans), timelineLegend(), timeline,
    el("h2", {}, "Events"), events,
    el("h2", {}, "Bookings"), bookings,
    el("h2", {}, "Policy"), policy);

  const renderResource = () => {
    const r = view.resource;
    head.replaceChildren(
      el("h1", {}, r.displayName ? `${r.displayName} ` : "", el("span", { class: "mono", id: "resource-name" }, r.name)),
      el("p", { class: "quiet" }, [r.kind && `kind ${r.kind}`, r.adHoc ? "ad hoc" : "registered", `revision ${r.revision}`, `${r.leaseCount} holder(s)`, `${r.waiting} waiting`].filter(Boolean).join(" · ")));
    holders.replaceChildren(table([
      { title: "holder", cell: (l) => l.holder },
      { title: "principal", cell: (l) => l.principal },
      { title: "mode", cell: (l) => `${modeName(l.mode)}${l.units !== "1" && l.units !== "0" ? ` ×${l.units}` : ""}` },
      { title: "fencing token", num: true, cell: (l) => l.fencingToken },
      { title: "time left", num: true, cell: (l) => el("span", { class: "countdown", "data-expires": String(view.fetchedAt + seconds(l.remaining) * 1000) }, duration(seconds(l.remaining))) },
      { title: "status", cell: (l) => el("span", { class: `pill ${l.status === "LEASE_STATUS_GRACE" ? "warn" : "ok"}` }, statusName(l.status)) },
      { title: "lease", mono: true, cell: (l) => [l.leaseId, l.sessionId ? el("div", { class: "quiet" }, `session ${l.sessionId}`) : null] },
      ...(state.admin ? [{ title: "", cell: (l) => [
        el("button", { type: "button", class: "small", "data-action": "release", onclick: () => releaseLease(r.name, l, refresh) }, "Release"), " ",
        el("button", { type: "button", class: "small", "data-action": "transfer", onclick: () => transferLease(r.name, l, refresh) }, "Transfer")] }] : []),
    ], r.leases || [], "Nobody holds it.", {}, (l) => ({ "data-holder": l.holder, "data-token": l.fencingToken })));
    tick();
    waiters.replaceChildren(table([
      { title: "#", num: true, cell: (w) => w.position },
      { title: "holder", cell: (w) => w.holder },
      { title: "principal", cell: (w) => w.principal },
      { title: "mode", cell: (w) => `${modeName(w.mode)}${w.units !== "1" && w.units !== "0" ? ` ×${w.units}` : ""}` },
      { title: "waits until", cell: (w) => when(w.waitDeadline) },
      ...(state.admin ? [{ title: "", cell: (w) => el("button", { type: "button", class: "small", "data-action": "cancel-wait", onclick: () => cancelWait(r.name, w, refresh) }, "Cancel wait") }] : []),
    ], r.waiters || [], "Nobody is waiting.", {}, (w) => ({ "data-waiter": w.holder })));
    bookings.replaceChildren(table([
      { title: "holder", cell: (b) => b.holder },
      { title: "principal", cell: (b) => b.principal },
      { title: "from", cell: (b) => when(b.start) },
      { title: "for", cell: (b) => duration(seconds(b.duration)) },
    ], r.bookings || [], "No bookings."));
    const p = r.policy || {};
    policy.replaceChildren(table([
      { title: "rule", cell: (row) => row[0] },
      { title: "value", cell: (row) => row[1] },
    ], [
      ["default ttl", duration(seconds(p.defaultTtl))],
      ["longest ttl", duration(seconds(p.maxTtl))],
      ["longest tenure", seconds(p.maxLifetime) ? duration(seconds(p.maxLifetime)) : "no cap"],
      ["renewal grace", duration(seconds(p.renewalGrace))],
      ["lock delay", duration(seconds(p.lockDelay))],
      ["transferable", p.transferable ? "yes" : "no"],
      ["shared modes", (p.sharedModes || []).map(modeName).join(", ") || "none (exclusive)"],
      ["units", p.totalUnits && p.totalUnits !== "0" ? p.totalUnits : "1"],
      ["most holders", p.maxHolders || "no cap"],
      ["most waiters", p.maxWaiters || "the default"],
      ["bookable", p.bookable ? "yes" : "no"],
    ], ""));
  };

  const tick = () => {
    for (const span of holders.querySelectorAll(".countdown")) {
      span.textContent = duration((Number(span.dataset.expires) - performance.now()) / 1000);
    }
  };

  const refresh = async () => {
    try {
      const reply = await api("GET", `/v1/resources/${enc(name)}`, undefined, signal);
      view.resource = reply.resource;
      view.fetchedAt = performance.now();
      renderResource();
      drawTimeline();
      return reply;
    } catch (e) {
      if (!signal.aborted) notify(`Reading ${name} was refused: ${e}`);
      return null;
    }
  };

  const addEntries = (entries) => {
    for (const e of entries) if (e.resource === name) view.entries.set(`${e.revision}/${e.seq}`, e);
  };

  const drawTimeline = () => {
    const entries = [...view.entries.values()].sort((a, b) => Number(a.revision) - Number(b.revision) || a.seq - b.seq);
    timeline.replaceChildren(drawTenures(entries, view.resource?.leases || [], view.span));
    events.replaceChildren(table([
      { title: "revision", num: true, cell: (e) => e.revision },
      { title: "at", cell: (e) => when(e.at) },
      { title: "event", cell: (e) => eventName(e.event) },
      { title: "holder", cell: (e) => e.holder },
      { title: "token", num: true, cell: (e) => (e.fencingToken !== "0" ? e.fencingToken : "") },
      { title: "by", cell: (e) => e.actor },
      { title: "detail", cell: (e) => detail(e) },
    ], entries.slice(-100).reverse(), "No events.", {}, (e) => ({ "data-event": eventName(e.event) })));
  };

  const first = await refresh();
  if (!first) return;
  // The last hour of history (at most 2,000 events), newest first.
  const since = Date.now() - 3600 * 1000;
  let pageToken = "";
  for (let pages = 0; pages < 4; pages++) {
    let page;
    try {
      page = await api("GET", `/v1/resources/${enc(name)}/history${query({ pageSize: 500, pageToken })}`, undefined, signal);
    } catch (e) {
      if (!signal.aborted) notify(`The history of ${name} was refused: ${e}`);
      break;
    }
    addEntries(page.entries || []);
    pageToken = page.nextPageToken;
    const oldest = page.entries?.[page.entries.length - 1];
    if (!pageToken || !oldest || Date.parse(oldest.at) < since) break;
  }
  drawTimeline();

  const timer = setInterval(() => { tick(); drawTimeline(); }, 1000);
  const countdown = setInterval(tick, 200);
  signal.addEventListener("abort", () => { clearInterval(timer); clearInterval(countdown); }, { once: true });

  // Live: every event of this resource after what was read.
  let pending = false;
  watch({ resource: name, startRevision: first.readRevision }, (message) => {
    if (!message.events?.length) return;
    addEntries(message.events);
    drawTimeline();
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; refresh(); }, 50);
  }, signal, () => route());
}

function detail(e) {
  const parts = [];
  if (e.toHolder) parts.push(`to ${e.toHolder} (token ${e.toFencingToken})`);
  if (e.sessionId) parts.push(`session ${e.sessionId}`);
  if (e.from && e.from !== "LEASE_STATUS_UNSPECIFIED") parts.push(`${statusName(e.from)} → ${statusName(e.to)}`);
  if (e.units && e.units !== "0" && e.units !== "1") parts.push(`${e.units} units`);
  return parts.join(" · ");
}

function timelineLegend() {
  const key = (kind, text) => el("span", {}, el("i", { class: `key-${kind}` }), text);
  return el("div", { class: "legend" },
    key("live", "held now"), key("released", "released"), key("reclaimed", "reclaimed (✕)"), key("transferred", "transferred (→)"), key("queued", "queued (•)"));
}

// Tenures from the events: a bar per lease, in the lane of its holder, from its grant to its
// end (release, reclaim or transfer), or to now for a lease still held.
function tenuresOf(entries, live) {
  const open = new Map();
  const tenures = [];
  const marks = [];
  const start = (leaseId, holder, token, at, session) => {
    const t = { leaseId, holder, token, start: at, end: null, how: "live", session };
    open.set(leaseId, t);
    tenures.push(t);
    return t;
  };
  const end = (e, how) => {
    let t = open.get(e.leaseId);
    if (!t) t = start(e.leaseId, e.holder, e.fencingToken, null, e.sessionId);
    t.end = Date.parse(e.at);
    t.how = how;
    open.delete(e.leaseId);
    return t;
  };
  for (const e of entries) {
    const at = Date.parse(e.at);
    switch (e.event) {
      case "EVENT_TYPE_ACQUIRED":
      case "EVENT_TYPE_ADMITTED":
        start(e.leaseId, e.holder, e.fencingToken, at, e.sessionId);
        break;
      case "EVENT_TYPE_RELEASED":
        end(e, "released");
        break;
      case "EVENT_TYPE_RECLAIMED":
        end(e, "reclaimed");
        marks.push({ kind: "reclaimed", holder: e.holder, at });
        break;
      case "EVENT_TYPE_TRANSFERRED": {
        end(e, "transferred");
        start(e.toLeaseId, e.toHolder, e.toFencingToken, at, e.sessionId);
        marks.push({ kind: "transferred", holder: e.holder, to: e.toHolder, at });
        break;
      }
      case "EVENT_TYPE_QUEUED":
        marks.push({ kind: "queued", holder: e.holder, at });
        break;
      default:
    }
  }
  // A live lease granted before the events on hand starts at the window's edge.
  const liveIds = new Set(live.map((l) => l.leaseId));
  for (const l of live) if (!open.has(l.leaseId)) start(l.leaseId, l.holder, l.fencingToken, Date.parse(l.acquiredAt), l.sessionId);
  // One whose end is not on hand (yet) is drawn as held until the resource says otherwise.
  for (const t of tenures) if (t.end === null && !liveIds.has(t.leaseId)) t.how = "unknown";
  return { tenures, marks };
}

function drawTenures(entries, live, spanSeconds) {
  const { tenures, marks } = tenuresOf(entries, live);
  const now = Date.now();
  let from;
  if (spanSeconds) from = now - spanSeconds * 1000;
  else {
    const starts = tenures.map((t) => t.start).concat(marks.map((m) => m.at)).filter((t) => t !== null && !Number.isNaN(t));
    // From the earliest event on hand (at least the last 3 s, at most the last hour).
    const earliest = Math.max(Math.min(now - 3_000, ...starts), now - 3600_000);
    from = earliest - (now - earliest) * 0.03;
  }
  const lanes = [];
  for (const t of tenures) if (!lanes.includes(t.holder)) lanes.push(t.holder);
  for (const m of marks) if (!lanes.includes(m.holder)) lanes.push(m.holder);
  if (!lanes.length) return el("p", { class: "quiet" }, "No tenures in the events on hand.");
  const labelWidth = 150, width = Math.max(640, (main.clientWidth || 900) - 30), lane = 30, top = 22;
  const height = top + lanes.length * lane + 6;
  const x = (t) => labelWidth + ((Math.min(Math.max(t, from), now) - from) / (now - from)) * (width - labelWidth - 10);
  const y = (holder) => top + lanes.indexOf(holder) * lane;
  const g = [];
  // The axis: five ticks.
  for (let i = 0; i <= 4; i++) {
    const t = from + ((now - from) * i) / 4;
    g.push(svg("line", { class: "gridline", x1: x(t), x2: x(t), y1: top - 4, y2: height }));
    g.push(svg("text", { class: "axis", x: x(t), y: 12, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" },
      i === 4 ? "now" : `−${duration((now - t) / 1000)}`));
  }
  lanes.forEach((holder) => g.push(svg("text", { class: "lane-label", x: 6, y: y(holder) + 19 }, holder.length > 22 ? `${holder.slice(0, 21)}…` : holder)));
  for (const t of tenures) {
    const begin = t.start === null || Number.isNaN(t.start) ? from : t.start;
    const finish = t.end ?? now;
    if (finish < from) continue;
    const x1 = x(begin), x2 = Math.max(x(finish), x1 + 3);
    const title = `${t.holder}: token ${t.token}, ${t.how}${t.session ? `, session ${t.session}` : ""}`;
    g.push(svg("rect", {
      class: `tenure ${t.how}`, x: x1, y: y(t.holder) + 5, width: x2 - x1, height: lane - 10, rx: 3,
      "data-holder": t.holder, "data-token": t.token, "data-end": t.how,
    }, svg("title", {}, title)));
    const label = `#${t.token}`;
    if (x2 - x1 > label.length * 7 + 6) g.push(svg("text", { class: "token", x: x1 + 4, y: y(t.holder) + 19 }, label));
  }
  for (const m of marks) {
    if (m.at < from) continue;
    const mx = x(m.at), my = y(m.holder);
    if (m.kind === "reclaimed") {
      g.push(svg("g", { class: "mark-reclaimed", "data-mark": "reclaimed", "data-holder": m.holder },
        svg("line", { x1: mx - 5, y1: my + 7, x2: mx + 5, y2: my + 23 }), svg("line", { x1: mx + 5, y1: my + 7, x2: mx - 5, y2: my + 23 }),
        svg("title", {}, `${m.holder}: reclaimed`)));
    } else if (m.kind === "transferred" && lanes.includes(m.to)) {
      const ty = y(m.to);
      g.push(svg("path", { class: "mark-transferred", "data-mark": "transferred", "data-holder": m.holder, d: `M${mx},${my + 15} L${mx},${ty + 15} M${mx - 4},${ty + 15 + (ty > my ? -6 : 6)} L${mx},${ty + 15} L${mx + 4},${ty + 15 + (ty > my ? -6 : 6)}` },
        svg("title", {}, `${m.holder} → ${m.to}: transferred`)));
    } else if (m.kind === "queued") {
      g.push(svg("circle", { class: "mark-queued", "data-mark": "queued", "data-holder": m.holder, cx: mx, cy: my + 15, r: 3 }, svg("title", {}, `${m.holder}: queued`)));
    }
  }
  g.push(svg("line", { class: "now", x1: x(now), x2: x(now), y1: top - 4, y2: height }));
  return svg("svg", { width, height, role: "img", "aria-label": "tenures of this resource over time" }, g);
}

async function releaseLease(resource, lease, done) {
  const ok = await confirmAction("Release this lease?",
    `${lease.holder} (principal ${lease.principal}) holds ${resource} with token ${lease.fencingToken}. Releasing ends the lease at once; its holder will be refused by the token's next check.`);
  if (!ok) return;
  await act(`Releasing ${lease.holder}'s lease`, () => api("POST",
    `/v1/resources/${enc(resource)}/leases/${enc(lease.leaseId)}:release`,
    { holder: lease.holder, fencingToken: lease.fencingToken, requestId: crypto.randomUUID() }));
  done();
}

async function transferLease(resource, lease, done) {
  const values = await confirmAction("Transfer this lease?",
    `Hands ${lease.holder}'s lease on ${resource} (token ${lease.fencingToken}) to another holder, under a new token.`,
    [{ name: "toHolder", label: "New holder", required: true }, { name: "toPrincipal", label: "New principal (empty: the same)" }]);
  if (!values) return;
  await act(`Transferring ${lease.holder}'s lease`, () => api("POST",
    `/v1/resources/${enc(resource)}/leases/${enc(lease.leaseId)}:transfer`,
    { holder: lease.holder, fencingToken: lease.fencingToken, toHolder: values.toHolder, toPrincipal: values.toPrincipal, requestId: crypto.randomUUID() }));
  done();
}

async function cancelWait(resource, waiter, done) {
  const ok = await confirmAction("Cancel this wait?", `${waiter.holder} leaves the waiting room of ${resource}; its acquire ends as cancelled.`);
  if (!ok) return;
  await act(`Cancelling ${waiter.holder}'s wait`, () => api("POST", `/v1/resources/${enc(resource)}:cancelWait`,
    { holder: waiter.holder, queuedRevision: waiter.queuedRevision, requestId: crypto.randomUUID() }));
  done();
}

// ---------------------------------------------------------------------------------------
// Lease lookup

async function leasesPage(signal, params) {
  const holder = el("input", { name: "holder", value: params.get("holder") || "", id: "lookup-holder" });
  const principal = el("input", { name: "principal", value: params.get("principal") || "", id: "lookup-principal" });
  const result = el("div", { id: "lookup" });
  show(el("h1", {}, "Lease lookup"),
    el("form", {
      class: "inline",
      onsubmit: (event) => {
        event.preventDefault();
        location.hash = `#/leases${query({ holder: holder.value.trim(), principal: principal.value.trim() })}`;
      },
    }, el("label", {}, "Holder", holder), el("label", {}, "or principal", principal), el("button", { type: "submit" }, "Look up")),
    result);
  if (!holder.value && !principal.value) {
    result.replaceChildren(el("p", { class: "quiet" }, "Name a holder or a principal to see its live leases."));
    return;
  }
  try {
    const reply = await api("GET", `/v1/leases${query({ holder: holder.value, principal: principal.value, pageSize: 200 })}`, undefined, signal);
    const fetched = performance.now();
    result.replaceChildren(table([
      { title: "resource", cell: (l) => resourceLink(l.resource) },
      { title: "holder", cell: (l) => l.holder },
      { title: "principal", cell: (l) => l.principal },
      { title: "token", num: true, cell: (l) => l.fencingToken },
      { title: "time left (at lookup)", num: true, cell: (l) => duration(seconds(l.remaining) - (performance.now() - fetched) / 1000) },
      { title: "status", cell: (l) => statusName(l.status) },
    ], reply.leases || [], "No live leases.", {}, (l) => ({ "data-resource": l.resource })),
    reply.nextPageToken ? el("p", { class: "quiet" }, "The first 200 are shown.") : null);
  } catch (e) {
    if (!signal.aborted) result.replaceChildren(el("p", { class: "card" }, `The lookup was refused: ${e}`));
  }
}

// ---------------------------------------------------------------------------------------
// Routing (#/page?query)

async function route() {
  state.page.abort();
  state.page = new AbortController();
  const dialog = document.getElementById("confirm");
  if (dialog.open) dialog.close("cancel");
  const signal = state.page.signal;
  notify("");
  const hash = location.hash.replace(/^#\/?/, "") || "resources";
  const [path, q = ""] = hash.split("?");
  const params = new URLSearchParams(q);
  const [page, ...rest] = path.split("/");
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("current", a.dataset.page === (page === "resource" ? "resources" : page));
  try {
    if (page === "cluster") await clusterPage(signal);
    else if (page === "resource") await resourcePage(signal, decodeURIComponent(rest.join("/")));
    else if (page === "leases") await leasesPage(signal, params);
    else await resourcesPage(signal, params);
  } catch (e) {
    if (signal.aborted || (e instanceof ApiError && e.status === 401)) return;
    notify(`${e}`);
  }
}

async function start() {
  let ok;
  try {
    ok = await signIn();
  } catch (e) {
    notify(`The node could not be reached: ${e}`);
    return;
  }
  if (!ok) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    loginPage();
    return;
  }
  route();
}

window.addEventListener("hashchange", () => {
  if (state.signedIn) route();
});
start();
