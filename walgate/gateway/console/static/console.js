// walgate console: polls /ui/api/* once a second and renders it. Everything a user or client wrote (names, keys,
// values, headers, SQL results) reaches the page through text nodes only: no innerHTML anywhere.
"use strict";

const POLL_MS = 1000;
const WINDOW_MS = 120_000; // what the charts show
const state = {
  tab: "topics", topic: null, group: null,
  throughput: new Map(), // topic -> [{t, v: records/s}]
  lag: new Map(), // group -> [{t, v: total lag}]
  lastHwm: new Map(), // topic -> {t, sum}
  topics: [], groups: [], rendered: new Map(), // element id -> JSON of what it shows (skip identical redraws)
};

// ------------------------------------------------------------------ DOM helpers

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "data") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  node.append(...children.map((c) => (c instanceof Node ? c : document.createTextNode(c ?? ""))));
  return node;
}

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Replace the rows of `tbody` by `rows` (arrays of cells), unless they are what it already shows. */
function fill(tbody, rows, rowProps = () => ({})) {
  const key = JSON.stringify(rows, (_, v) => (v instanceof Element ? v.outerHTML : v));
  if (state.rendered.get(tbody.id) === key) return;
  state.rendered.set(tbody.id, key);
  tbody.replaceChildren(...rows.map((cells, i) => el("tr", rowProps(i), ...cells.map(cell))));
}

function cell(c) {
  if (c instanceof Node) return el("td", {}, c);
  if (c !== null && typeof c === "object") return el("td", { class: "num" }, c.num); // num(text): right-aligned text
  if (typeof c === "number") return el("td", { class: "num" }, fmt(c));
  return el("td", {}, c ?? "–");
}

const num = (text) => ({ num: text });
const fmt = (n) => (n === null || n === undefined ? "–" : Number.isInteger(n) ? n.toLocaleString("en-US")
  : n.toLocaleString("en-US", { maximumFractionDigits: 1 }));

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return num(`${i ? n.toFixed(1) : n} ${units[i]}`);
}

async function getJson(url, options) {
  const response = await fetch(url, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.desc || `HTTP ${response.status}`);
  return body;
}

// ------------------------------------------------------------------ charts (inline SVG)

function push(series, key, t, v) {
  const points = series.get(key) || [];
  points.push({ t, v });
  while (points.length && points[0].t < t - WINDOW_MS) points.shift();
  series.set(key, points);
}

/** A line chart of `points` over the last WINDOW_MS filling `svg` (180 px high), or a 120x24 sparkline. */
function chart(svg, points, { small = false } = {}) {
  const [w, h] = small ? [120, 24] : [Math.max(svg.clientWidth, 360), 180];
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const pad = small ? { l: 1, r: 1, t: 2, b: 2 } : { l: 56, r: 12, t: 12, b: 22 };
  const now = Date.now();
  const max = Math.max(1, ...points.map((p) => p.v));
  const x = (t) => pad.l + ((t - (now - WINDOW_MS)) / WINDOW_MS) * (w - pad.l - pad.r);
  const y = (v) => h - pad.b - (v / max) * (h - pad.t - pad.b);
  const nodes = [];
  if (!small) {
    for (const f of [0, 0.5, 1]) {
      nodes.push(svgEl("line", { x1: pad.l, x2: w - pad.r, y1: y(max * f), y2: y(max * f), class: "grid" }));
      const label = { x: pad.l - 6, y: y(max * f) + 4, "text-anchor": "end", class: f === 1 ? "ymax" : "ytick" };
      nodes.push(svgEl("text", label, fmt(max * f)));
    }
    nodes.push(svgEl("text", { x: pad.l, y: h - 6 }, "−2 min"));
    nodes.push(svgEl("text", { x: w - pad.r, y: h - 6, "text-anchor": "end" }, "now"));
  }
  if (points.length > 1) {
    const line = points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(" ");
    const base = `${x(points.at(-1).t).toFixed(1)},${y(0)} ${x(points[0].t).toFixed(1)},${y(0)}`;
    nodes.push(svgEl("polygon", { points: `${line} ${base}`, class: "area" }));
    nodes.push(svgEl("polyline", { points: line, class: "line" }));
  }
  svg.replaceChildren(...nodes);
  return svg;
}

const sparkline = (points) => chart(svgEl("svg", { class: "spark" }), points, { small: true });
const last = (points) => (points && points.length ? points.at(-1).v : null);

// ------------------------------------------------------------------ topics

function renderTopics() {
  $("no-topics").hidden = state.topics.length > 0;
  fill($("topic-rows"), state.topics.map((t) => {
    const records = t.partitions.reduce((s, p) => s + p.high_watermark - p.log_start, 0);
    const hwm = t.partitions.reduce((s, p) => s + p.high_watermark, 0);
    const size = t.partitions.reduce((s, p) => s + p.size_bytes, 0);
    const rate = state.throughput.get(t.name);
    return [t.name, t.kind === "kafka" ? "Kafka" : `TDengine (${t.kind})`, t.source ? `${t.db}.${t.source}` : t.db,
      t.partitions.length, records, hwm, bytes(size), last(rate) ?? num("–"), sparkline(rate || [])];
  }), (i) => ({ data: { topic: state.topics[i].name }, class: state.topics[i].name === state.topic ? "selected" : "",
    onclick: () => selectTopic(state.topics[i].name) }));
  renderTopicDetail();
}

function selectTopic(name) {
  state.topic = name;
  state.rendered.clear();
  renderTopics();
  refreshTail();
}

function renderTopicDetail() {
  const topic = state.topics.find((t) => t.name === state.topic);
  $("topic-detail").hidden = !topic;
  if (!topic) return;
  $("topic-title").textContent = `Topic ${topic.name}`;
  chart($("topic-chart"), state.throughput.get(topic.name) || []);
  fill($("partition-rows"), topic.partitions.map((p) => [p.partition, p.log_start, p.high_watermark,
    p.high_watermark - p.log_start, bytes(p.size_bytes), p.segments]));
  const select = $("tail-partition");
  if (select.options.length !== topic.partitions.length || select.dataset.topic !== topic.name) {
    select.dataset.topic = topic.name;
    select.replaceChildren(...topic.partitions.map((p) => el("option", { value: p.partition }, String(p.partition))));
  }
}

async function refreshTail() {
  if (!state.topic || state.tab !== "topics" || $("tail-pause").checked) return;
  const params = new URLSearchParams({ topic: state.topic, partition: $("tail-partition").value || "0",
    limit: $("tail-limit").value });
  try {
    const tail = await getJson(`/ui/api/tail?${params}`);
    if (tail.topic !== state.topic) return;
    fill($("tail-rows"), tail.records.reverse().map((r) => [r.offset, new Date(r.timestamp).toISOString(),
      r.key, el("code", {}, r.value ?? "null"), r.headers.map(([k, v]) => `${k}=${v ?? "null"}`).join("  ")]),
    (i) => ({ data: { offset: tail.records[i].offset } }));
  } catch (e) {
    fill($("tail-rows"), [[el("span", { class: "error" }, e.message)]]);
  }
}

// ------------------------------------------------------------------ consumer groups

function renderGroups() {
  $("no-groups").hidden = state.groups.length > 0;
  fill($("group-rows"), state.groups.map((g) => [g.group_id, g.state, g.type, g.members.length,
    totalLag(g), sparkline(state.lag.get(g.group_id) || [])]),
  (i) => ({ data: { group: state.groups[i].group_id }, class: state.groups[i].group_id === state.group ? "selected" : "",
    onclick: () => { state.group = state.groups[i].group_id; state.rendered.clear(); renderGroups(); } }));
  const group = state.groups.find((g) => g.group_id === state.group);
  $("group-detail").hidden = !group;
  if (!group) return;
  const share = group.share ? ` · ${group.share.in_flight} in flight · ${group.share.acquired} acquired · `
    + `${group.share.archived} archived · ${group.share.redelivered} redelivered` : "";
  $("group-title").textContent = `Group ${group.group_id} · ${group.state}${share}`;
  chart($("group-chart"), state.lag.get(group.group_id) || []);
  fill($("member-rows"), group.members.map((m) => [m.member_id, m.client_id, m.host, m.state,
    Object.entries(m.assignment).map(([t, ps]) => `${t}: ${ps.join(", ")}`).join("; ") || "–"]));
  fill($("lag-rows"), group.partitions.map((p) => [p.topic, p.partition, p.committed, p.high_watermark, p.lag]),
    (i) => ({ data: { topic: group.partitions[i].topic, partition: group.partitions[i].partition } }));
}

const totalLag = (g) => g.partitions.reduce((s, p) => s + (p.lag ?? 0), 0);

// ------------------------------------------------------------------ databases

async function refreshDatabases() {
  const { databases } = await getJson("/ui/api/databases");
  const key = JSON.stringify(databases);
  if (state.rendered.get("database-list") === key) return;
  state.rendered.set("database-list", key);
  const open = new Set([...document.querySelectorAll("#database-list details[open]")].map((d) => d.dataset.db));
  $("no-databases").hidden = databases.length > 0;
  $("database-list").replaceChildren(...databases.map((db) => {
    const more = db.table_count > db.tables.length ? ` (first ${db.tables.length})` : "";
    const details = el("details", { data: { db: db.name } },
      el("summary", {}, el("strong", {}, db.name), ` · ${db.vgroups} vgroups · precision ${db.precision} · `
        + `${db.stables.length} supertables · `
        + (db.table_count === null ? "tables on other nodes" : `${db.table_count} tables`)),
      el("h3", {}, "Supertables"),
      table(["Supertable", "Columns", "Tags"], db.stables.map((s) => [s.name, s.columns, s.tags])),
      el("h3", {}, `Tables${more}`),
      table(["Table", "Supertable", "Vgroup"], db.tables.map((t) => [t.name, t.stable || "–", t.vgroup])));
    details.open = open.has(db.name);
    return details;
  }));
}

function table(headers, rows) {
  if (!rows.length) return el("p", { class: "empty" }, "none");
  return el("table", { class: "list" }, el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map(cell)))));
}

// ------------------------------------------------------------------ cluster (cluster mode only)

const ids = (list) => (list.length ? list.join(", ") : "–");

/** What is wrong with vgroup `p`, or how it is kept: the page's Status column. */
function vgroupStatus(p) {
  const marks = [];
  if (p.offline) marks.push("offline");
  if (p.under_replicated && p.kind !== "no-state") marks.push("under-replicated");
  if (p.under_min_isr && p.kind !== "no-state") marks.push("under min ISR");
  if (p.kind === "no-state") marks.push("no partition state read yet");
  if (p.kind === "one-copy") marks.push("one copy");
  if (p.adding_replicas.length || p.removing_replicas.length) marks.push("moving replicas");
  return marks.join(" · ") || "ok";
}

async function refreshCluster() {
  const cluster = await getJson("/ui/api/cluster");
  const member = cluster.cluster !== null; // a cluster's node: the Cluster tab shows
  $("cluster-link").hidden = !member;
  $("cluster-single").hidden = member;
  $("cluster-view").hidden = !member;
  if (!member) return;
  const { nodes, partitions } = cluster;
  $("cluster-title").textContent = `Cluster ${cluster.cluster} · seen from node ${cluster.node_id}`;
  const down = nodes.filter((n) => !n.live).length;
  $("cluster-summary").textContent = `${nodes.length} nodes (${down} down) · controller `
    + `${cluster.controller ?? "none elected"} · ${partitions.length} vgroups · `
    + `${partitions.filter((p) => p.offline).length} offline · `
    + `${partitions.filter((p) => p.under_replicated && p.kind === "replicated").length} under-replicated · `
    + `${partitions.filter((p) => p.under_min_isr && p.kind === "replicated").length} under min ISR`;
  fill($("node-rows"), nodes.map((n) => [n.node_id, n.address, n.http, n.rack, n.live ? "yes" : "no",
    n.broker_epoch ?? num("–"), n.controller ? "controller" : "",
    !n.live ? "no (down)" : n.caught_up ? "yes" : `catching up: ${n.catching_up.join(", ")}`]),
  (i) => ({ data: { node: nodes[i].node_id }, class: nodes[i].live ? "" : "down" }));
  fill($("vgroup-rows"), partitions.map((p) => [p.topic ? `topic ${p.topic}` : p.database ?? p.db_id, p.vgroup,
    p.leader ?? num("none"), p.leader_epoch, ids(p.replicas), ids(p.isr), ids(p.elr), ids(p.adding_replicas),
    ids(p.removing_replicas), vgroupStatus(p)]),
  (i) => {
    const p = partitions[i];
    const alarm = p.offline || p.under_replicated || p.under_min_isr;
    return { data: { vgroup: `${p.topic ?? p.database ?? p.db_id}/${p.vgroup}` }, class: alarm ? "alarm" : "" };
  });
}

// ------------------------------------------------------------------ SQL

async function runSql(event) {
  event.preventDefault();
  const sql = $("sql-text").value.trim();
  if (!sql) return;
  const status = $("sql-status");
  const [thead, tbody] = $("sql-result").children;
  status.className = "";
  status.textContent = "running…";
  const started = performance.now();
  try {
    const body = await getJson("/rest/sql", { method: "POST", body: sql });
    const columns = body.column_meta.map((c) => c[0]);
    thead.replaceChildren(el("tr", {}, ...columns.map((c) => el("th", {}, c))));
    tbody.replaceChildren(...body.data.map((row) => el("tr", {}, ...row.map((v) => el("td",
      { class: typeof v === "number" ? "num" : "" }, v === null ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v))))));
    status.textContent = `${fmt(body.rows)} row${body.rows === 1 ? "" : "s"} in ${(performance.now() - started).toFixed(0)} ms`;
  } catch (e) {
    thead.replaceChildren();
    tbody.replaceChildren();
    status.className = "error";
    status.textContent = e.message;
  }
}

// ------------------------------------------------------------------ polling and tabs

async function poll() {
  try {
    const [{ topics }, { groups }] = await Promise.all([getJson("/ui/api/topics"), getJson("/ui/api/groups")]);
    const t = Date.now();
    for (const topic of topics) {
      const sum = topic.partitions.reduce((s, p) => s + p.high_watermark, 0);
      const prev = state.lastHwm.get(topic.name);
      if (prev) push(state.throughput, topic.name, t, Math.max(0, (sum - prev.sum) / ((t - prev.t) / 1000)));
      state.lastHwm.set(topic.name, { t, sum });
    }
    for (const g of groups) push(state.lag, g.group_id, t, totalLag(g));
    state.topics = topics;
    state.groups = groups;
    renderTopics();
    renderGroups();
    if (state.tab === "topics") await refreshTail();
    if (state.tab === "databases") await refreshDatabases();
    if (state.tab === "cluster") await refreshCluster();
    $("status").textContent = `live · ${new Date(t).toLocaleTimeString()}`;
    $("status").className = "";
  } catch (e) {
    $("status").textContent = `disconnected: ${e.message}`;
    $("status").className = "error";
  }
  setTimeout(poll, POLL_MS);
}

function showTab() {
  state.tab = ["topics", "groups", "databases", "sql", "cluster"].find((t) => `#${t}` === location.hash) || "topics";
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.id !== state.tab;
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("active", link.dataset.tab === state.tab);
  if (state.tab === "databases") refreshDatabases().catch(() => {});
  if (state.tab === "topics") refreshTail();
  if (state.tab === "cluster") refreshCluster().catch(() => {});
}

document.addEventListener("DOMContentLoaded", () => {
  window.addEventListener("hashchange", showTab);
  $("sql-form").addEventListener("submit", runSql);
  $("sql-text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("sql-form").requestSubmit();
  });
  for (const id of ["tail-partition", "tail-limit", "tail-pause"]) $(id).addEventListener("change", refreshTail);
  showTab();
  if (state.tab !== "cluster") refreshCluster().catch(() => {}); // whether to show the Cluster tab
  poll();
});
