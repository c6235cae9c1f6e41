// The operator dashboard: a hash-routed page over the REST API, refreshed every few seconds.
"use strict";

const REFRESH_MS = 5000;
const RESOURCES = ["cpu", "dram", "slow", "llc"];
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
    // Through the CSSOM: the Content-Security-Policy refuses style attributes, not this.
    else if (k === "style") el.style.cssText = v;
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
const pct = fmt.percent;
const signedPct = fmt.signedPercent;
const bytes = fmt.bytes;

class Unauthorized extends Error {}

async function request(path) {
  const response = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` } });
  if (response.status === 401) throw new Unauthorized("the token was refused");
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Error(`${response.status}: ${detail}`);
  }
  return response;
}

async function api(path) { return (await request(path)).json(); }

// One page of a paged list: its rows and the cursor of the next page (null on the last).
async function apiPage(path) {
  const response = await request(path);
  return { rows: await response.json(), next: response.headers.get("X-Next-Cursor") };
}

// Pages of the fleet's lists: a page's requests cost the same at 16 nodes or 20,000.
const PAGE = 200;

// A cell is text or a node; prose(text) marks one that may wrap (a sentence, not a value).
const prose = (text) => ({ prose: text });

function table(caption, headers, rows, rowAttrs) {
  const cell = (c) => (c && c.prose !== undefined ? h("td", { class: "prose" }, c.prose) : h("td", {}, c));
  return h("div", { class: "table-wrap" }, h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, rows.map((r, i) => h("tr", rowAttrs ? rowAttrs(i) : {}, r.map(cell))))));
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
  charts.fitCharts(page);
}

function region(id) { return h("div", { id, "aria-live": "polite" }); }
function fill(id, ...content) {
  const el = document.getElementById(id);
  if (!el) return;
  el.replaceChildren(...content);
  charts.fitCharts(el);
}

// -- pages ----------------------------------------------------------------------------------

async function pageCluster() {
  setPage("Cluster", region("cluster-meters"),
    h("div", { class: "grid2" },
      h("section", {}, h("h3", {}, "Utilization over the last hour"), region("cluster-history"),
        h("p", { class: "legend" }, RESOURCES.map((r) => [h("span", { style: `background:${charts.RESOURCE_COLOURS[r]}` }), r]))),
      h("section", {}, h("h3", {}, "Stranding"), region("cluster-stranding"))),
    h("section", {}, h("h3", {}, "Per-node and per-pool heat map"), region("cluster-heat")));
  state.refreshData = async () => {
    const [capacity, page, pools, history] = await Promise.all([
      api("/v1/cluster/capacity"), apiPage(`/v1/cluster/nodes?limit=${PAGE}`), api(`/v1/cluster/pools?limit=${PAGE}`), api("/v1/cluster/history?minutes=60")]);
    const nodes = page.rows;
    const shown = page.next ? `the first ${nodes.length} of ${capacity.nodes} nodes (the Nodes page pages through all)` : `${nodes.length} nodes`;
    const now = Date.now();
    // The server's snapshots (one per period, kept for a week), then the value right now.
    for (const r of RESOURCES) {
      state.history[r] = history.map((p) => [Date.parse(p.at), p[r]]);
      state.history[r].push([now, capacity.utilization[r]]);
    }
    fill("cluster-meters", h("div", { class: "cards" },
      meter("CPU", capacity.utilization.cpu), meter("DRAM", capacity.utilization.dram),
      meter("Slow memory", capacity.utilization.slow), meter("LLC ways", capacity.utilization.llc)),
      h("p", {}, `${capacity.nodes} nodes: ${capacity.cpus} CPUs, ${bytes(capacity.dram_bytes)} DRAM, ${bytes(capacity.slow_bytes)} slow memory, ${capacity.llc_ways} LLC ways.`));
    const series = Object.fromEntries(RESOURCES.map((r) => [r, state.history[r].length > 1 ? state.history[r] : [[now - 1000, state.history[r][0][1]], ...state.history[r]]]));
    fill("cluster-history", charts.lineChart({ series, label: "Cluster utilization per resource over time" }));
    // Each node's utilization and stranding come from the API, by the one rule the metrics use.
    const perNode = nodes.map((n) => ({ n, u: n.utilization, s: n.stranding }));
    const bad = perNode.filter((x) => x.s);
    fill("cluster-stranding", bad.length
      ? table(`${bad.length} node(s) stranding resources, of ${shown}`, ["node", "full", "idle"], bad.map((x) => [x.n.name, x.s.full.join(", "), x.s.idle.join(", ")]))
      : h("p", {}, `No node has a resource above 85% while another is below 35% (${shown}).`));
    const rows = [...perNode.map((x) => x.n.name), ...pools.map((p) => `pool ${p.name}`)];
    const values = [...perNode.map((x) => x.u), ...pools.map((p) => ({ slow: p.slow_bytes ? p.reserved_slow_bytes / p.slow_bytes : 0 }))];
    fill("cluster-heat", charts.heatmap({
      rows, cols: RESOURCES, rowLabel: "node", colLabel: "resource", cellW: 70, cellH: 20,
      label: `Utilization per node and rack pool, by resource: ${shown}`,
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
    const [workloads, decisions] = await Promise.all([api("/v1/workloads?limit=500"), api("/v1/recommendations?limit=500")]);
    // The decision log is newest first: the first seen per workload is its latest.
    const latest = new Map();
    for (const d of decisions) if (!latest.has(d.workload_id)) latest.set(d.workload_id, d);
    const recommendation = (w) => {
      const d = latest.get(w.id);
      if (!d) return "none yet";
      return h("a", { href: `#/workload/${encodeURIComponent(w.name)}`, class: "latest-decision", title: `decision ${d.id}, ${fmt.when(d.created_at)}` },
        `slow ${pct(d.slow_ratio)}, ${d.llc_ways} LLC ways (${d.objective})`);
    };
    fill("workload-list", table(`${workloads.length} workloads`, ["workload", "latest recommendation", "profiles", "latest status", "host kind", "known host kind"],
      workloads.map((w) => {
        const p = w.profiles[0] || {};
        return [h("a", { href: `#/workload/${encodeURIComponent(w.name)}` }, w.name), recommendation(w), w.profiles.length, p.status || "—", p.host_kind || "—", p.host_kind_known ? "yes" : "no (flagged)"];
      })));
  };
}

const configKey = (ratio, ways) => `${Number(ratio).toFixed(3)}/${ways}`;
const currencyCache = {};

// The currency of a price profile (costs are in it); fetched once per profile.
async function currencyOf(priceProfile) {
  if (!(priceProfile in currencyCache)) {
    try { currencyCache[priceProfile] = (await api(`/v1/price-profiles/${encodeURIComponent(priceProfile)}`)).profile.currency || "USD"; }
    catch (err) { if (err instanceof Unauthorized) throw err; currencyCache[priceProfile] = "USD"; }
  }
  return currencyCache[priceProfile];
}

// Hourly price of a candidate: Eq. 1's cost is the hourly price times the predicted hours.
const hourly = (c) => c.cost / (c.predicted_seconds / 3600);

async function pageWorkload(name) {
  setPage(`Workload ${name}`, h("p", {}, h("a", { href: "#/workloads" }, "← all workloads")),
    h("div", { class: "grid2" }, h("section", {}, h("h3", {}, "Fitted model"), region("w-model")),
      h("section", {}, h("h3", {}, "Latest decision"), region("w-decision"))),
    h("div", { class: "grid2" },
      h("section", {}, h("h3", {}, "Predicted slowdown vs fastmax"), region("w-slowdown")),
      h("section", {}, h("h3", {}, "Cost vs the cheapest (Eq. 1)"), region("w-cost"))),
    region("w-heat-legend"),
    h("section", {}, h("h3", {}, "Time vs cost, Pareto frontier"), region("w-pareto")));
  state.refreshData = async () => {
    const key = encodeURIComponent(name);
    const decisions = await api(`/v1/recommendations?workload=${key}&limit=1`);
    const rec = decisions.length ? (await api(`/v1/recommendations/${decisions[0].id}`)).recommendation : null;
    // Draw the grid the decision searched, so its pick is one of the cells.
    const model = await api(`/v1/workloads/${key}/model?grid=${rec && rec.grid.startsWith("host") ? "host" : "paper"}`);
    const currency = rec && rec.price_profile === model.price_profile ? rec.currency : await currencyOf(model.price_profile);
    const m = model.model, d = model.diagnostics;
    fill("w-model", table("Parameters", ["parameter", "value"], [
      ["fit path", d.path], ["CPI_cache (on-core)", fmt.sigFigs(m.cpi_cache)],
      ["P_dram = L_dram/MLP (cycles/miss)", fmt.sigFigs(m.p_dram)], ["P_slow = ΔL/MLP (cycles/access)", fmt.sigFigs(m.p_slow)],
      ["MLP (from nominal latency)", d.mlp_estimate ? fmt.sigFigs(d.mlp_estimate) : "—"],
      ["footprint", `${bytes(m.footprint_bytes)} in ${m.tags.length} structures`], ["fastmax time", fmt.seconds(m.fastmax_seconds)],
      ["largest CPI residual", pct(Math.max(...Object.values(d.cpi_residuals).map(Math.abs)))],
    ]), d.flags.length ? h("ul", { "aria-label": "fit flags" }, d.flags.map((f) => h("li", { class: "flag" }, `${f.code}: ${f.message}`))) : h("p", {}, "No fit flags."));
    const ratios = [...new Set(model.points.map((p) => p.slow_ratio))];
    const ways = [...new Set(model.points.map((p) => p.llc_ways))];
    const at = (i, j) => model.points[i * ways.length + j];
    const feasible = model.points.filter((p) => p.feasible);
    const cheapest = feasible.reduce((a, b) => (b.cost < a.cost ? b : a));
    const chosenKey = rec ? configKey(rec.chosen.configuration.slow_ratio, rec.chosen.configuration.llc_ways) : null;
    const chosenPoint = chosenKey ? model.points.find((p) => configKey(p.slow_ratio, p.llc_ways) === chosenKey) : null;
    // Colour scales saturate where decisions stop being close: the all-slow corner would
    // otherwise wash out the few percent that separate the candidates near the optimum.
    const SLOWDOWN_FULL = 1.0, COST_FULL = 0.3;
    const grid = (valueOf, textOf, what) => charts.heatmap({
      rows: ratios.map((r) => r.toFixed(1)), cols: ways, rowLabel: "slow ratio", colLabel: "LLC ways",
      label: `${what} over slow ratio and LLC ways for ${name}`,
      cell: (i, j) => {
        const p = at(i, j);
        if (!p.feasible) return null;
        const marks = [p === chosenPoint ? "chosen" : null, p === cheapest ? "cheapest" : null].filter(Boolean);
        return { value: valueOf(p), text: textOf(p), marks,
          title: `ratio ${p.slow_ratio}, ${p.llc_ways} ways: ${what} ${textOf(p)}${marks.length ? ` (${marks.join(" and ")})` : ""}` };
      },
    });
    fill("w-slowdown", grid((p) => Math.min(1, p.slowdown / SLOWDOWN_FULL), (p) => `${(p.slowdown * 100).toFixed(0)}%`, "slowdown"));
    fill("w-cost", grid((p) => Math.min(1, p.cost_vs_cheapest / COST_FULL), (p) => `${(p.cost_vs_cheapest * 100).toFixed(0)}%`, "cost above the cheapest"));
    const cheapestText = `ratio ${cheapest.slow_ratio.toFixed(1)}, ${cheapest.llc_ways} ways, ${fmt.money(cheapest.cost, currency)} per run`;
    fill("w-heat-legend", h("p", { class: "legend", id: "heat-legend" },
      h("span", { class: "mark-chosen" }),
      chosenPoint ? `chosen by the latest decision (${rec.objective}): ratio ${chosenPoint.slow_ratio.toFixed(1)}, ${chosenPoint.llc_ways} ways`
        : rec ? "the latest decision's pick is not on this grid" : "no decision yet",
      h("span", { class: "mark-cheapest" }),
      chosenPoint === cheapest ? `cheapest: the same cell (${cheapestText})` : `cheapest: ${cheapestText}`,
      ". Slowdown colour is full from 100 %, cost colour from 30 % above the cheapest."));
    if (rec) {
      const c = rec.chosen;
      fill("w-decision", h("p", {}, `${rec.objective}, T = ${pct(rec.threshold)}, ${new Date(decisions[0].created_at).toLocaleString()}: `,
        h("strong", {}, `predicted slowdown ${promiseOf(rec)}`), `, ${fmt.money(c.cost, rec.currency)} per run, ${fmt.money(hourly(c), rec.currency, "/h")}.`),
        ...candidateTables(rec));
    } else {
      fill("w-decision", h("p", {}, "No recommendation has been made for this workload yet."));
    }
    const frontier = new Set();
    const sorted = [...feasible].sort((a, b) => a.predicted_seconds - b.predicted_seconds || a.cost - b.cost);
    let best = Infinity;
    for (const p of sorted) if (p.cost < best) { frontier.add(p); best = p.cost; }
    fill("w-pareto", charts.scatter({
      points: feasible.map((p) => ({
        x: p.predicted_seconds, y: p.cost, onFrontier: frontier.has(p), chosen: p === chosenPoint,
        label: `ratio ${p.slow_ratio}, ${p.llc_ways} ways: ${fmt.seconds(p.predicted_seconds)}, ${fmt.money(p.cost, currency)} per run`,
      })),
      label: `Predicted time against cost per run for every configuration of ${name}; the frontier and the chosen one marked`,
      xLabel: "predicted run time", xUnit: "s", yLabel: "cost per run", currency,
    }), h("p", { class: "legend" }, h("span", { style: "background:#b45f06" }), "Pareto frontier", h("span", { style: "background:#e69f00" }), "chosen",
      h("span", { style: "background:#9fb7d0" }), "other", h("span", { class: "mark-off" }, "▶"), "off scale, drawn at the edge"));
  };
}

// Where each tagged structure goes: all fast, all slow, or split with its fast share.
function tierOf(p) {
  if (p.slow_bytes === 0) return "fast";
  if (p.fast_bytes === 0) return "slow";
  return `split (${pct(p.fast_bytes / p.size_bytes)} fast)`;
}

// A bar of the fast/slow split of the memory a configuration gives.
function splitBar(fast, slow) {
  const share = fast + slow ? fast / (fast + slow) : 1;
  return h("div", { class: "split", role: "img", "aria-label": `memory split: ${bytes(fast)} fast (DRAM), ${bytes(slow)} slow` },
    h("span", { class: "fast", style: `width:${(share * 100).toFixed(1)}%` }), h("span", { class: "slow", style: `width:${((1 - share) * 100).toFixed(1)}%` }));
}

// The expanded decision: why, what it predicts, how memory is split and where each structure goes.
function decisionDetail(full, r) {
  const rec = full.recommendation, u = rec.utilization, c = rec.chosen, conf = c.configuration;
  const cur = rec.currency;
  const why = conf.slow_ratio === rec.best.configuration.slow_ratio && conf.llc_ways === rec.best.configuration.llc_ways
    ? "The objective's best configuration also had the lowest packing penalty."
    : `Within T of the best, it had the lowest packing penalty (${fmt.sigFigs(c.packing_penalty ?? 0)} against ${fmt.sigFigs(rec.best.packing_penalty ?? 0)} for the best, costing ${signedPct(c.cost_vs_cheapest)} over the cheapest).`;
  const placement = [...rec.placement].sort((a, b) => b.hotness_per_mib - a.hotness_per_mib);
  const planned = placement.reduce((acc, p) => ({ fast: acc.fast + p.fast_bytes, slow: acc.slow + p.slow_bytes }), { fast: 0, slow: 0 });
  return [
    h("p", {}, why),
    h("div", { class: "grid2" },
      h("div", {},
        table("Prediction", ["predicted", "value"], [
          ["slowdown vs fastmax", promiseOf(rec)],
          ["run time", c.predicted_seconds_upper == null ? fmt.seconds(c.predicted_seconds)
            : `${fmt.seconds(c.predicted_seconds)} (at most ${fmt.seconds(c.predicted_seconds_upper)} at ${levelOf(rec)})`],
          ["fastmax run time", fmt.seconds(rec.fastmax_seconds)], ["cost per run", fmt.money(c.cost, cur)],
          ["price per hour", fmt.money(hourly(c), cur, "/h")], ["cost vs the cheapest", signedPct(c.cost_vs_cheapest)],
        ])),
      h("div", {},
        table("Memory split", ["tier", "size", "share"], [
          ["fast (DRAM)", bytes(conf.dram_bytes), pct(1 - conf.slow_ratio)], ["slow", bytes(conf.slow_bytes), pct(conf.slow_ratio)],
          ["LLC ways", conf.llc_ways, ""], ["vCPUs", conf.vcpus, ""],
        ]),
        splitBar(conf.dram_bytes, conf.slow_bytes))),
    placement.length
      ? table(`Placement plan: ${placement.length} structures, ${bytes(planned.fast)} fast and ${bytes(planned.slow)} slow (hottest first)`,
        // Per thousand instructions (and per GiB for hotness): the raw rates are small fractions.
        ["structure", "size", "tier", "fast", "slow", "LLC misses per 1000 instructions (sampled; cache hits never reach memory)", "hotness (LLC misses per 1000 instructions per GiB)"],
        placement.map((p) => [p.tag, bytes(p.size_bytes), tierOf(p), bytes(p.fast_bytes), bytes(p.slow_bytes), fmt.sigFigs(p.accesses_per_instruction * 1000), fmt.sigFigs(p.hotness_per_mib * 1024 * 1000)]),
        (i) => ({ "data-tier": tierOf(placement[i]).split(" ")[0] }))
      : h("p", {}, "No tagged structures: the allocator places memory by the ratio alone."),
    verificationOf(rec),
    table("Inputs", ["input", "value"], [
      ["id", r.id], ["bundle hash", full.bundle_hash.slice(0, 16) + "…"], ["model version", rec.model_version],
      ["price profile", rec.price_profile], ["grid", `${rec.grid} (${rec.feasible_count}/${rec.grid_size} feasible)`],
      ["priced at", pricedAt(rec)],
      ["utilization", `cpu ${pct(u.cpu)}, dram ${pct(u.dram)}, slow ${pct(u.slow)}, llc ${pct(u.llc)} (${full.utilization_source})`],
      ["machine", `${rec.machine.cpus} CPUs, ${bytes(rec.machine.dram_bytes)} DRAM, ${bytes(rec.machine.slow_bytes)} slow, ${rec.machine.llc_ways} ways`],
      ["fit", prose(`${rec.fit.path}; flags: ${rec.fit.flags.map((f) => f.code).join(", ") || "none"}`)],
    ]),
  ];
}

// The size a decision is priced at, and whose it is (a decision stored before vCPUs were given
// carries none: it was priced with the profile's, its configuration's).
const SIZED_FROM = { request: "the pods' memory request", caller: "the size given", profile: "the profile's traced footprint" };
function pricedAt(rec) {
  const vcpus = rec.vcpus ?? rec.chosen.configuration.vcpus;
  return `${bytes(rec.memory_bytes)} (${SIZED_FROM[rec.sized_from] || rec.sized_from}), ${vcpus} vCPUs`;
}

// The decision's promise: the predicted slowdown and the most it will be at the confidence level.
function promiseOf(rec) {
  return rec.promise || signedPct(rec.chosen.slowdown);
}

function levelOf(rec) {
  return rec.confidence == null ? "" : `${Math.round(rec.confidence * 1000) / 10} %`;
}

function slowdownCell(x) {
  return x.slowdown_upper == null ? signedPct(x.slowdown) : `${signedPct(x.slowdown)} (at most ${signedPct(x.slowdown_upper)})`;
}

// Runners-up within T, the other candidates beyond it, and what the interval left out, and why.
function candidateTables(rec) {
  const cols = ["slow ratio", "ways", "DRAM", "slow", "slowdown", "cost per run", "vs cheapest", "penalty"];
  const row = (x) => [x.configuration.slow_ratio.toFixed(1), x.configuration.llc_ways, bytes(x.configuration.dram_bytes), bytes(x.configuration.slow_bytes),
    slowdownCell(x), fmt.money(x.cost, rec.currency), signedPct(x.cost_vs_cheapest), fmt.sigFigs(x.packing_penalty ?? 0)];
  const within = rec.objective.startsWith("least") ? "DRAM share within T of the least" : "cost within T of the best";
  const out = [table(`Chosen and runners-up (${within}; lowest packing penalty first)`, cols, rec.within_threshold.map(row),
    (i) => (i === 0 ? { class: "chosen" } : {}))];
  if (rec.other_candidates && rec.other_candidates.length) {
    out.push(table("Other candidates (beyond T, best first)", cols, rec.other_candidates.map(row)));
  }
  if (rec.dropped && rec.dropped.length) {
    out.push(table(`Left out by the ${levelOf(rec)} interval`, ["slow ratio", "ways", "slowdown", "vs cheapest", "why"],
      rec.dropped.map((d) => [d.candidate.configuration.slow_ratio.toFixed(1), d.candidate.configuration.llc_ways, slowdownCell(d.candidate),
        signedPct(d.candidate.cost_vs_cheapest), prose(d.reason)])));
  }
  return out;
}

// What verification runs told the model, and the run it asks for next (model/verification.py).
function verificationOf(rec) {
  const v = rec.verification;
  if (!v) {
    // As `tmc get decisions ID` says it: why this decision names no run to make.
    const why = "this decision was made without a confidence level, the paper's Algorithm 1 as published";
    return h("p", { id: "verification" }, `No verification run asked: ${why}.`);
  }
  const next = v.next_slow_ratio === null || v.next_slow_ratio === undefined
    ? (v.runs >= v.budget ? `none: the budget of ${v.budget} runs is spent` : "none: the chosen configuration is measured and no other is likely to beat it")
    : `slow ratio ${v.next_slow_ratio.toFixed(1)}, ${v.next_llc_ways} ways (a run of the profiled input there, annotated tmc.dev/verification-run)`;
  const runs = v.runs
    ? table(`Verification runs: ${v.runs} of ${v.budget}, largest error ${pct(v.largest_error)}`,
      ["slow ratio", "runs", "measured vs predicted"],
      v.verified.map((x) => [x.slow_ratio.toFixed(1), x.runs, signedPct(x.measured_over_predicted - 1)]))
    : h("p", {}, h("strong", {}, "Verification runs: "), `none yet (up to ${v.budget}); the prediction is the model's alone.`);
  const checked = v.chosen_slowdown_measured == null ? null
    : h("p", {}, h("strong", {}, "Promise checked: "), `the chosen configuration measured ${signedPct(v.chosen_slowdown_measured)} against fastmax.`);
  const ignored = v.ignored && v.ignored.length
    ? table("Runs ignored", ["run", "slow ratio", "ways", "seconds", "why"],
      v.ignored.map((x) => [x.run_id ?? "", x.slow_ratio.toFixed(2), x.llc_ways, fmt.seconds(x.seconds), prose(x.reason)]))
    : null;
  return h("div", { id: "verification" }, runs, [checked, ignored].filter(Boolean), h("p", {}, h("strong", {}, "Next run: "), next));
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
  const opened = new Map(); // id -> the full decision, for the ones the reader has expanded
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
        if (!details.open) { opened.delete(r.id); return; }
        if (details.dataset.loaded) return;
        details.dataset.loaded = "1";
        // A decision never changes: fetched once, and kept open across the periodic refresh.
        if (!opened.has(r.id)) opened.set(r.id, null);
        if (!opened.get(r.id)) opened.set(r.id, await api(`/v1/recommendations/${r.id}`));
        details.append(...decisionDetail(opened.get(r.id), r));
      });
      if (opened.has(r.id)) details.open = true;
      return details;
    })));
  };
}

async function pageNodes(cursor) {
  setPage("Nodes", region("node-list"));
  state.refreshData = async () => {
    const from = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
    const [page, pools, held] = await Promise.all([
      apiPage(`/v1/cluster/nodes?limit=${PAGE}${from}`), api(`/v1/cluster/pools?limit=${PAGE}`), apiPage(`/v1/cluster/reservations?limit=${PAGE}`)]);
    const nodes = page.rows;
    const reservations = held.rows;
    const bitmap = (n) => {
      const bits = [];
      // BigInt: JavaScript's bit operators wrap at 32 bits and a CAT mask has up to 64.
      const mask = BigInt(n.llc_mask);
      for (let i = 0; i < n.llc_ways; i++) bits.push(h("span", { class: (mask >> BigInt(i)) & 1n ? "on" : "" }));
      // A DRA claim's ways are a count whose run the node chose: in no mask, so not drawn as
      // ways of the bitmap, but said beside it and counted in the ways reserved.
      const counted = n.counted_llc_ways || 0;
      const reserved = n.reserved_llc_ways ?? bits.filter((b) => b.className === "on").length;
      const label = `${reserved} of ${n.llc_ways} ways reserved, mask 0x${n.llc_mask.toString(16)}` +
        (counted ? `, ${counted} of them a count whose run the node chose` : "");
      const map = h("span", { class: "bitmap", role: "img", "aria-label": label }, bits);
      return counted ? h("span", {}, map, h("span", { class: "counted-ways" }, ` + ${counted} ways, run chosen by the node`)) : map;
    };
    const ways = (r) => r.llc_mask == null ? `${r.llc_ways} ways, run chosen by the node` : `${r.llc_ways} (0x${r.llc_mask.toString(16)})`;
    const pager = h("p", { class: "pager" }, cursor ? h("a", { href: "#/nodes" }, "First page") : "",
      cursor && page.next ? " · " : "", page.next ? h("a", { href: `#/nodes/${encodeURIComponent(page.next)}`, class: "next-page" }, `Next ${PAGE} nodes`) : "");
    fill("node-list", table(`${nodes.length} nodes${cursor || page.next ? ` (a page of ${PAGE}, by name)` : ""}`, ["node", "host kind", "CPUs used", "DRAM used", "slow used", "pool", "LLC ways (CAT bitmap)"],
      nodes.map((n) => [n.name, n.host_kind, `${n.reserved_cpus}/${n.cpus}`, `${bytes(n.reserved_dram_bytes)} / ${bytes(n.dram_bytes)}`,
        `${bytes(n.reserved_slow_bytes)} / ${n.pool ? "pool" : bytes(n.slow_bytes)}`, n.pool || "local", bitmap(n)])),
    table(`${pools.length} rack pools`, ["pool", "capacity", "reserved", "nodes"], pools.map((p) => [p.name, bytes(p.slow_bytes), bytes(p.reserved_slow_bytes), p.nodes.length])),
    pager,
    table(held.next ? `The first ${reservations.length} reservations, by node (tmc get placements lists all)` : `${reservations.length} reservations`, ["pod", "node", "vCPUs", "DRAM", "slow", "LLC ways (mask)"],
      reservations.map((r) => [`${r.namespace}/${r.pod_name}`, r.node_name, r.vcpus, bytes(r.dram_bytes), bytes(r.slow_bytes) + (r.slow_from_pool ? " (pool)" : ""), ways(r)])));
  };
}

// -- routing, login, refresh ----------------------------------------------------------------

// reports.js and planner.js load after this file: looked up when the page is shown.
const ROUTES = {
  cluster: pageCluster, workloads: pageWorkloads, workload: pageWorkload, decisions: pageDecisions, nodes: pageNodes,
  planner: () => window.plannerPage(), reports: () => window.reportPages.list(), report: (name) => window.reportPages.page(name),
};

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
    const section = { workload: "workloads", report: "reports" }[page] || page;
    if (a.dataset.page === section) a.setAttribute("aria-current", "page");
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
