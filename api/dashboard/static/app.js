// The operator dashboard: a hash-routed page over the REST API, refreshed every few seconds.
"use strict";

const REFRESH_MS = 5000;
const RESOURCES = ["cpu", "dram", "slow", "llc"];
const GIB = 2 ** 30;
const state = {
  token: sessionStorage.getItem("tmc.token"),
  history: { cpu: [], dram: [], slow: [], llc: [] },
  timer: null,
  refreshData: null, // the current page's data refresher
};

// -- helpers --------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick") el.addEventListener("click", v);
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
const pct = (x) => `${(x * 100).toFixed(1)}%`;
const gib = (b) => `${(b / GIB).toFixed(2)} GiB`;
const signedPct = (x) => `${x >= 0 ? "+" : ""}${(x * 100).toFixed(1)}%`;

class Unauthorized extends Error {}

async function api(path) {
  const response = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` } });
  if (response.status === 401) throw new Unauthorized("the token was refused");
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Error(`${response.status}: ${detail}`);
  }
  return response.json();
}

function table(caption, headers, rows, rowAttrs) {
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, rows.map((r, i) => h("tr", rowAttrs ? rowAttrs(i) : {}, r.map((c) => h("td", {}, c))))));
}

function meter(label, value) {
  return h("div", { class: "card" },
    h("div", {}, h("strong", {}, label), ` ${pct(value)}`),
    h("div", { class: "meter", role: "meter", "aria-label": `${label} utilization`, "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": (value * 100).toFixed(1) },
      h("span", { style: `width:${Math.min(100, value * 100)}%` })));
}

function setPage(title, ...content) {
  const page = document.getElementById("page");
  page.replaceChildren(h("h2", {}, title), ...content);
}

function region(id) { return h("div", { id, "aria-live": "polite" }); }
function fill(id, ...content) { const el = document.getElementById(id); if (el) el.replaceChildren(...content); }

// -- pages ----------------------------------------------------------------------------------

function nodeUtilization(n, pools) {
  const pool = pools.find((p) => p.name === n.pool);
  const slowCap = n.pool ? (pool ? pool.slow_bytes / Math.max(1, pool.nodes.length) : 0) : n.slow_bytes;
  const ways = n.llc_mask.toString(2).split("").filter((b) => b === "1").length;
  return {
    cpu: n.reserved_cpus / n.cpus,
    dram: n.reserved_dram_bytes / n.dram_bytes,
    slow: slowCap ? n.reserved_slow_bytes / slowCap : 0,
    llc: ways / n.llc_ways,
  };
}

// A node strands capacity when one resource is (nearly) full while another sits mostly idle.
function stranded(u) {
  const values = RESOURCES.map((r) => u[r]);
  const full = RESOURCES.filter((r) => u[r] >= 0.85);
  const idle = RESOURCES.filter((r) => u[r] <= 0.35);
  return full.length && idle.length ? { full, idle } : null;
}

async function pageCluster() {
  setPage("Cluster", region("cluster-meters"),
    h("div", { class: "grid2" },
      h("section", {}, h("h3", {}, "Utilization over the last hour"), region("cluster-history"),
        h("p", { class: "legend" }, RESOURCES.map((r) => [h("span", { style: `background:${charts.RESOURCE_COLOURS[r]}` }), r]))),
      h("section", {}, h("h3", {}, "Stranding"), region("cluster-stranding"))),
    h("section", {}, h("h3", {}, "Per-node and per-pool heat map"), region("cluster-heat")));
  state.refreshData = async () => {
    const [capacity, nodes, pools, history] = await Promise.all([
      api("/v1/cluster/capacity"), api("/v1/cluster/nodes"), api("/v1/cluster/pools"), api("/v1/cluster/history?minutes=60")]);
    const now = Date.now();
    // The server's snapshots (one per period, kept for a week), then the value right now.
    for (const r of RESOURCES) {
      state.history[r] = history.map((p) => [Date.parse(p.at), p[r]]);
      state.history[r].push([now, capacity.utilization[r]]);
    }
    fill("cluster-meters", h("div", { class: "cards" },
      meter("CPU", capacity.utilization.cpu), meter("DRAM", capacity.utilization.dram),
      meter("Slow memory", capacity.utilization.slow), meter("LLC ways", capacity.utilization.llc)),
      h("p", {}, `${capacity.nodes} nodes: ${capacity.cpus} CPUs, ${gib(capacity.dram_bytes)} DRAM, ${gib(capacity.slow_bytes)} slow memory, ${capacity.llc_ways} LLC ways.`));
    const series = Object.fromEntries(RESOURCES.map((r) => [r, state.history[r].length > 1 ? state.history[r] : [[now - 1000, state.history[r][0][1]], ...state.history[r]]]));
    fill("cluster-history", charts.lineChart({ series, label: "Cluster utilization per resource over time" }));
    const perNode = nodes.map((n) => ({ n, u: nodeUtilization(n, pools) }));
    const bad = perNode.map((x) => ({ ...x, s: stranded(x.u) })).filter((x) => x.s);
    fill("cluster-stranding", bad.length
      ? table(`${bad.length} node(s) stranding resources`, ["node", "full", "idle"], bad.map((x) => [x.n.name, x.s.full.join(", "), x.s.idle.join(", ")]))
      : h("p", {}, "No node has a resource above 85% while another is below 35%."));
    const rows = [...perNode.map((x) => x.n.name), ...pools.map((p) => `pool ${p.name}`)];
    const values = [...perNode.map((x) => x.u), ...pools.map((p) => ({ slow: p.slow_bytes ? p.reserved_slow_bytes / p.slow_bytes : 0 }))];
    fill("cluster-heat", charts.heatmap({
      rows, cols: RESOURCES, rowLabel: "node", colLabel: "resource", cellW: 70, cellH: 20,
      label: "Utilization per node and rack pool, by resource",
      cell: (i, j) => {
        const v = values[i][RESOURCES[j]];
        return v === undefined ? null : { value: v, text: pct(v), title: `${rows[i]} ${RESOURCES[j]}: ${pct(v)}` };
      },
    }));
  };
}

async function pageWorkloads() {
  setPage("Workloads", region("workload-list"));
  state.refreshData = async () => {
    const workloads = await api("/v1/workloads?limit=500");
    fill("workload-list", table(`${workloads.length} workloads`, ["workload", "profiles", "latest status", "host kind", "known host kind"],
      workloads.map((w) => {
        const p = w.profiles[0] || {};
        return [h("a", { href: `#/workload/${encodeURIComponent(w.name)}` }, w.name), w.profiles.length, p.status || "—", p.host_kind || "—", p.host_kind_known ? "yes" : "no (flagged)"];
      })));
  };
}

async function pageWorkload(name) {
  setPage(`Workload ${name}`, h("p", {}, h("a", { href: "#/workloads" }, "← all workloads")),
    h("div", { class: "grid2" }, h("section", {}, h("h3", {}, "Fitted model"), region("w-model")),
      h("section", {}, h("h3", {}, "Latest decision"), region("w-decision"))),
    h("div", { class: "grid2" },
      h("section", {}, h("h3", {}, "Predicted slowdown vs fastmax"), region("w-slowdown")),
      h("section", {}, h("h3", {}, "Cost vs the cheapest (Eq. 1)"), region("w-cost"))),
    h("section", {}, h("h3", {}, "Time vs cost, Pareto frontier"), region("w-pareto")));
  state.refreshData = async () => {
    const key = encodeURIComponent(name);
    const [model, decisions] = await Promise.all([api(`/v1/workloads/${key}/model`), api(`/v1/recommendations?workload=${key}&limit=1`)]);
    const m = model.model, d = model.diagnostics;
    fill("w-model", table("Parameters", ["parameter", "value"], [
      ["fit path", d.path], ["CPI_cache (on-core)", m.cpi_cache.toFixed(4)],
      ["P_dram = L_dram/MLP (cycles/miss)", m.p_dram.toFixed(2)], ["P_slow = ΔL/MLP (cycles/access)", m.p_slow.toFixed(2)],
      ["MLP (from nominal latency)", d.mlp_estimate ? d.mlp_estimate.toFixed(2) : "—"],
      ["footprint", `${gib(m.footprint_bytes)} in ${m.tags.length} structures`], ["fastmax time", `${m.fastmax_seconds.toPrecision(4)} s`],
      ["largest CPI residual", pct(Math.max(...Object.values(d.cpi_residuals).map(Math.abs)))],
    ]), d.flags.length ? h("ul", { "aria-label": "fit flags" }, d.flags.map((f) => h("li", { class: "flag" }, `${f.code}: ${f.message}`))) : h("p", {}, "No fit flags."));
    const ratios = [...new Set(model.points.map((p) => p.slow_ratio))];
    const ways = [...new Set(model.points.map((p) => p.llc_ways))];
    const at = (i, j) => model.points[i * ways.length + j];
    const cheapest = model.points.filter((p) => p.feasible).reduce((a, b) => (b.cost < a.cost ? b : a));
    // Colour scales saturate where decisions stop being close: the all-slow corner would
    // otherwise wash out the few percent that separate the candidates near the optimum.
    const SLOWDOWN_FULL = 1.0, COST_FULL = 0.3;
    const grid = (valueOf, textOf, what) => charts.heatmap({
      rows: ratios.map((r) => r.toFixed(1)), cols: ways, rowLabel: "slow ratio", colLabel: "LLC ways",
      label: `${what} over slow ratio and LLC ways for ${name}`,
      cell: (i, j) => {
        const p = at(i, j);
        return p.feasible ? { value: valueOf(p), text: textOf(p), title: `ratio ${p.slow_ratio}, ${p.llc_ways} ways: ${what} ${textOf(p)}`, highlight: p === cheapest } : null;
      },
    });
    fill("w-slowdown", grid((p) => Math.min(1, p.slowdown / SLOWDOWN_FULL), (p) => `${(p.slowdown * 100).toFixed(0)}%`, "slowdown"));
    fill("w-cost", grid((p) => Math.min(1, p.cost_vs_cheapest / COST_FULL), (p) => `${(p.cost_vs_cheapest * 100).toFixed(0)}%`, "cost above the cheapest"),
      h("p", {}, "Outlined: the cheapest configuration. The colour is full from 30 % above it."));
    let chosenKey = null;
    if (decisions.length) {
      const rec = (await api(`/v1/recommendations/${decisions[0].id}`)).recommendation;
      const c = rec.chosen.configuration;
      chosenKey = `${c.slow_ratio}/${c.llc_ways}`;
      fill("w-decision", h("p", {}, `${rec.objective}, T = ${pct(rec.threshold)}, ${new Date(decisions[0].created_at).toLocaleString()}`),
        table("Chosen and runners-up within T (lowest packing penalty first)", ["slow ratio", "ways", "DRAM", "slow", "slowdown", "cost vs cheapest", "penalty"],
          rec.within_threshold.map((x) => [x.configuration.slow_ratio.toFixed(1), x.configuration.llc_ways, gib(x.configuration.dram_bytes), gib(x.configuration.slow_bytes), signedPct(x.slowdown), signedPct(x.cost_vs_cheapest), (x.packing_penalty ?? 0).toFixed(4)]),
          (i) => (i === 0 ? { class: "chosen" } : {})));
    } else {
      fill("w-decision", h("p", {}, "No recommendation has been made for this workload yet."));
    }
    const frontier = new Set();
    const sorted = model.points.filter((p) => p.feasible).sort((a, b) => a.predicted_seconds - b.predicted_seconds || a.cost - b.cost);
    let best = Infinity;
    for (const p of sorted) if (p.cost < best) { frontier.add(p); best = p.cost; }
    fill("w-pareto", charts.scatter({
      points: model.points.filter((p) => p.feasible).map((p) => ({
        x: p.predicted_seconds, y: p.cost, onFrontier: frontier.has(p), chosen: `${p.slow_ratio}/${p.llc_ways}` === chosenKey,
        label: `ratio ${p.slow_ratio}, ${p.llc_ways} ways: ${p.predicted_seconds.toPrecision(4)} s, ${p.cost.toPrecision(3)}`,
      })),
      label: `Predicted time against cost for every configuration of ${name}; the frontier and the chosen one marked`,
      xLabel: "predicted time (s)", yLabel: "cost",
    }), h("p", { class: "legend" }, h("span", { style: "background:#b45f06" }), "Pareto frontier", h("span", { style: "background:#e69f00" }), "chosen", h("span", { style: "background:#9fb7d0" }), "other"));
  };
}

async function pageDecisions() {
  const workloads = await api("/v1/workloads?limit=500");
  const form = h("form", { id: "decision-filter", role: "search" },
    h("label", { for: "f-workload" }, "Workload"),
    h("select", { id: "f-workload" }, h("option", { value: "" }, "all"), workloads.map((w) => h("option", { value: w.name }, w.name))),
    h("label", { for: "f-objective" }, " Objective"), h("input", { id: "f-objective", placeholder: "e.g. slo:5%", size: 10 }),
    h("label", { for: "f-search" }, " Search"), h("input", { id: "f-search", type: "search", placeholder: "id, ratio, source…" }),
    h("button", { type: "submit" }, "Apply"));
  form.addEventListener("submit", (e) => { e.preventDefault(); state.refreshData(); });
  setPage("Decisions", form, region("decision-list"));
  state.refreshData = async () => {
    const params = new URLSearchParams({ limit: "200" });
    const w = document.getElementById("f-workload").value, o = document.getElementById("f-objective").value.trim();
    if (w) params.set("workload", w);
    if (o) params.set("objective", o);
    const names = Object.fromEntries(workloads.map((x) => [x.id, x.name]));
    const needle = document.getElementById("f-search").value.trim().toLowerCase();
    const rows = (await api(`/v1/recommendations?${params}`)).filter((r) => !needle || JSON.stringify({ ...r, name: names[r.workload_id] }).toLowerCase().includes(needle));
    fill("decision-list", h("p", {}, `${rows.length} decision(s)`), h("div", {}, rows.map((r) => {
      const details = h("details", { "data-id": r.id },
        h("summary", {}, `${new Date(r.created_at).toLocaleString()} — ${names[r.workload_id] || r.workload_id}: ratio ${r.slow_ratio.toFixed(1)}, ${r.llc_ways} ways (${r.objective}, T ${pct(r.threshold)}, utilization from ${r.utilization_source})`));
      details.addEventListener("toggle", async () => {
        if (!details.open || details.dataset.loaded) return;
        details.dataset.loaded = "1";
        const full = await api(`/v1/recommendations/${r.id}`);
        const rec = full.recommendation, u = rec.utilization;
        const why = rec.chosen.configuration.slow_ratio === rec.best.configuration.slow_ratio && rec.chosen.configuration.llc_ways === rec.best.configuration.llc_ways
          ? "The objective's best configuration also had the lowest packing penalty."
          : `Within T of the best, it had the lowest packing penalty (${(rec.chosen.packing_penalty ?? 0).toFixed(4)} against ${(rec.best.packing_penalty ?? 0).toFixed(4)} for the best, costing ${signedPct(rec.chosen.cost_vs_cheapest)}).`;
        details.append(h("p", {}, why), table("Inputs", ["input", "value"], [
          ["id", r.id], ["bundle hash", full.bundle_hash.slice(0, 16) + "…"], ["model version", rec.model_version],
          ["price profile", rec.price_profile], ["grid", `${rec.grid} (${rec.feasible_count}/${rec.grid_size} feasible)`],
          ["utilization", `cpu ${pct(u.cpu)}, dram ${pct(u.dram)}, slow ${pct(u.slow)}, llc ${pct(u.llc)} (${full.utilization_source})`],
          ["machine", `${rec.machine.cpus} CPUs, ${gib(rec.machine.dram_bytes)} DRAM, ${gib(rec.machine.slow_bytes)} slow, ${rec.machine.llc_ways} ways`],
          ["fit", `${rec.fit.path}; flags: ${rec.fit.flags.map((f) => f.code).join(", ") || "none"}`],
        ]));
      });
      return details;
    })));
  };
}

async function pageNodes() {
  setPage("Nodes", region("node-list"));
  state.refreshData = async () => {
    const [nodes, pools, reservations] = await Promise.all([api("/v1/cluster/nodes"), api("/v1/cluster/pools"), api("/v1/cluster/reservations")]);
    const bitmap = (n) => {
      const bits = [];
      // BigInt: JavaScript's bit operators wrap at 32 bits and a CAT mask has up to 64.
      const mask = BigInt(n.llc_mask);
      for (let i = 0; i < n.llc_ways; i++) bits.push(h("span", { class: (mask >> BigInt(i)) & 1n ? "on" : "" }));
      const used = bits.filter((b) => b.className === "on").length;
      return h("span", { class: "bitmap", role: "img", "aria-label": `${used} of ${n.llc_ways} ways reserved, mask 0x${n.llc_mask.toString(16)}` }, bits);
    };
    fill("node-list", table(`${nodes.length} nodes`, ["node", "host kind", "CPUs used", "DRAM used", "slow used", "pool", "LLC ways (CAT bitmap)"],
      nodes.map((n) => [n.name, n.host_kind, `${n.reserved_cpus}/${n.cpus}`, `${gib(n.reserved_dram_bytes)} / ${gib(n.dram_bytes)}`,
        `${gib(n.reserved_slow_bytes)} / ${n.pool ? "pool" : gib(n.slow_bytes)}`, n.pool || "local", bitmap(n)])),
    table(`${pools.length} rack pools`, ["pool", "capacity", "reserved", "nodes"], pools.map((p) => [p.name, gib(p.slow_bytes), gib(p.reserved_slow_bytes), p.nodes.length])),
    table(`${reservations.length} reservations`, ["pod", "node", "vCPUs", "DRAM", "slow", "ways mask"],
      reservations.map((r) => [`${r.namespace}/${r.pod_name}`, r.node_name, r.vcpus, gib(r.dram_bytes), gib(r.slow_bytes) + (r.slow_from_pool ? " (pool)" : ""), `0x${r.llc_mask.toString(16)}`])));
  };
}

async function pageReports() {
  setPage("Reports", region("report-list"), region("report-body"));
  state.refreshData = async () => {
    const reports = await api("/v1/reports");
    fill("report-list", reports.length
      ? h("ul", {}, reports.map((r) => h("li", {}, h("a", { href: "#", onclick: async (e) => { e.preventDefault(); const body = await api(`/v1/reports/${encodeURIComponent(r.name)}`); fill("report-body", h("h3", {}, r.name), h("pre", {}, body.text)); } }, r.name), ` (${new Date(r.modified).toLocaleString()})`)))
      : h("p", {}, "No reports yet: run ./dev bench."));
  };
}

// -- routing, login, refresh ----------------------------------------------------------------

const ROUTES = { cluster: pageCluster, workloads: pageWorkloads, workload: pageWorkload, decisions: pageDecisions, nodes: pageNodes, reports: pageReports };

async function refresh() {
  if (!state.refreshData) return;
  try {
    await state.refreshData();
    document.getElementById("updated").textContent = `Updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    if (err instanceof Unauthorized) return signOut("Your token was refused; sign in again.");
    document.getElementById("updated").textContent = `Update failed: ${err.message}`;
  }
}

async function route() {
  if (!state.token) return showLogin();
  const [page, arg] = (location.hash.replace(/^#\//, "") || "cluster").split("/");
  const render = ROUTES[page] || pageCluster;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.page === (page === "workload" ? "workloads" : page)) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  state.refreshData = null;
  try {
    await render(arg ? decodeURIComponent(arg) : undefined);
  } catch (err) {
    if (err instanceof Unauthorized) return signOut("Your token was refused; sign in again.");
    setPage("Error", h("p", { class: "error", role: "alert" }, err.message));
    return;
  }
  await refresh();
  document.getElementById("main").focus();
}

function showLogin(message) {
  document.getElementById("nav").hidden = true;
  document.getElementById("page").replaceChildren();
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("token").focus();
}

function signOut(message) {
  state.token = null;
  sessionStorage.removeItem("tmc.token");
  showLogin(message);
}

document.getElementById("login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  state.token = document.getElementById("token").value.trim();
  try {
    await api("/v1/workloads?limit=1");
  } catch (err) {
    const why = err instanceof Unauthorized ? "Unknown or revoked token." : err.message.startsWith("403") ? "This token's role may not read the dashboard (use an operator or viewer token)." : err.message;
    return signOut(why);
  }
  sessionStorage.setItem("tmc.token", state.token);
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  route();
});
document.getElementById("logout").addEventListener("click", () => signOut("Signed out."));
window.addEventListener("hashchange", route);
if (state.token) { document.getElementById("nav").hidden = false; }
state.timer = setInterval(refresh, REFRESH_MS);
route();
