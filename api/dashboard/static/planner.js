// The capacity planner: a workload mix with arrival rates, sent to POST /v1/planner/capacity (a dry
// run: nothing is stored). Each workload's options are its latest decision's candidates within T,
// with their predicted time and cost, as `tmc plan capacity` builds them. Relies on app.js's globals.
"use strict";

(() => {
  const MAX_OPTIONS = 128; // per class, as the API bounds them
  const MAX_RATE = 1e7;
  const DEFAULT_RATE = 3600;
  let rowSeq = 0;

  async function plan(body) {
    const response = await fetch("/v1/planner/capacity", {
      method: "POST",
      headers: { Authorization: `Bearer ${state.token}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (response.status === 401) throw new Unauthorized("the token was refused");
    let out = null;
    try { out = await response.json(); } catch (_) { /* not JSON */ }
    if (response.status === 403) throw new Error("This token's role may not ask the planner (an operator token may).");
    if (!response.ok) {
      const why = out && (out.errors ? out.errors.map((e) => `${(e.loc || []).slice(1).join(".")}: ${e.msg}`).join("; ") : out.detail);
      throw new Error(`${response.status}: ${why || response.statusText}`);
    }
    return out;
  }

  // A class from the workload's latest decision: its candidates within T are the options.
  async function classOf(name, rate) {
    const listed = await api(`/v1/recommendations?workload=${encodeURIComponent(name)}&limit=1`);
    if (!listed.length) throw new Error(`${name} has no decision yet: ask for a recommendation first (tmc recommend).`);
    const rec = (await api(`/v1/recommendations/${listed[0].id}`)).recommendation;
    return {
      name, arrivals_per_hour: rate,
      options: rec.within_threshold.slice(0, MAX_OPTIONS).map((c) => ({
        vcpus: c.configuration.vcpus, dram_bytes: c.configuration.dram_bytes, slow_bytes: c.configuration.slow_bytes,
        llc_ways: c.configuration.llc_ways, seconds: c.predicted_seconds, cost: c.cost,
      })),
    };
  }

  function mixRow(names, name, rate) {
    const id = ++rowSeq;
    const row = h("div", { class: "mix-row", "data-row": id },
      h("label", { for: `p-workload-${id}` }, "Workload"),
      h("select", { id: `p-workload-${id}`, class: "p-workload" }, names.map((n) => h("option", { value: n, selected: n === name }, n))),
      h("label", { for: `p-rate-${id}` }, " arrivals per hour"),
      h("input", { id: `p-rate-${id}`, class: "p-rate", type: "number", min: "0", max: String(MAX_RATE), step: "any", value: String(rate), required: true, size: 8 }),
      h("button", { type: "button", "aria-label": `Remove workload row ${id}`, onclick: () => { if (document.querySelectorAll(".mix-row").length > 1) row.remove(); } }, "Remove"));
    return row;
  }

  function answer(out, currency) {
    const kinds = [...out.kinds].sort((a, b) => (a.total_hour ?? Infinity) - (b.total_hour ?? Infinity));
    const best = out.best;
    const money = (x) => (x === null ? "cannot host" : fmt.money(x, currency, "/h"));
    const load = (k) => ["cpu", "dram", "slow", "llc"].map((r) => `${r}${fmt.NBSP}${pct(k.load[r] || 0)}`).join(", ");
    const hostable = kinds.filter((k) => k.total_hour !== null);
    return [
      h("p", { id: "plan-best" }, h("strong", {}, `${best.machines} × ${best.kind}`),
        ` at ${money(best.total_hour)} (${money(best.machine_hour)} per machine; the greedy rule needs ${best.greedy_machines}), bound by ${best.binding}; tenants pay ${money(best.tenant_hour)}. A dry run at ${pct(out.fill)} fill, prices ${out.price_profile}: nothing was changed.`),
      table(`Machine kinds, cheapest first (${kinds.length})`, ["kind", "machines", "greedy", "per machine", "total", "tenants pay", "binding", "load at the plan", "status"],
        kinds.map((k) => [k.kind, k.machines, k.greedy_machines, money(k.machine_hour), money(k.total_hour), money(k.tenant_hour), k.binding, load(k), k.status]),
        (i) => (kinds[i].kind === best.kind ? { class: "chosen" } : {})),
      h("figure", { class: "data-plot" }, h("figcaption", {}, "What the mix costs per hour on each machine kind (the plan's machines × their price)"), charts.bars({
        label: "Total price per hour of the plan on each machine kind",
        groups: hostable.map((k) => `${k.machines} × ${k.kind}`), axis: `total per hour (${currency})`,
        series: [{ name: "plan", values: hostable.map((k) => k.total_hour) }],
        format: fmt.number,
      })),
      table(`Mix on ${best.kind}: arrivals per hour given each option (options as in the decision, lowest packing penalty first)`,
        ["workload", "per option"], Object.entries(best.mix).map(([name, rates]) => [name, rates.map((r) => fmt.number(r)).join(" · ")])),
    ];
  }

  async function plannerPage() {
    const [workloads, decisions] = await Promise.all([api("/v1/workloads?limit=500"), api("/v1/recommendations?limit=500")]);
    const decided = new Set(decisions.map((d) => d.workload_id));
    const names = workloads.filter((w) => decided.has(w.id)).map((w) => w.name);
    if (!names.length) {
      setPage("Capacity planner", h("p", {}, "No workload has a decision yet: the planner needs each workload's candidates (tmc recommend)."));
      return;
    }
    const rows = h("div", { id: "mix-rows" }, mixRow(names, names[0], DEFAULT_RATE));
    // Checked here rather than by the browser, so every bad value gets the same clear message.
    const form = h("form", { id: "planner-form", "aria-label": "Workload mix", novalidate: true },
      h("p", {}, "Which machine kind, and how many, cost least for a mix of workloads arriving at these rates. Each workload's options are its latest decision's candidates within T."),
      rows,
      h("p", {},
        h("button", { type: "button", id: "p-add", onclick: () => rows.append(mixRow(names, names[Math.min(rows.children.length, names.length - 1)], DEFAULT_RATE)) }, "Add workload"),
        " ", h("label", { for: "p-prices" }, "Prices"),
        h("select", { id: "p-prices" }, h("option", { value: "gce-n1" }, "gce-n1"), h("option", { value: "msv2-lsq" }, "msv2-lsq")),
        h("label", { for: "p-fill" }, " Fill"),
        h("input", { id: "p-fill", type: "number", min: "0.1", max: "1", step: "0.05", value: "0.85", size: 5 }),
        " ", h("button", { type: "submit" }, "Plan")));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      fill("plan-answer", h("p", {}, "Planning…"));
      try {
        const mix = [...document.querySelectorAll(".mix-row")].map((r) => [r.querySelector(".p-workload").value, r.querySelector(".p-rate").value.trim() === "" ? NaN : Number(r.querySelector(".p-rate").value)]);
        for (const [name, rate] of mix) if (!(rate >= 0 && rate <= MAX_RATE)) throw new Error(`${name}: the arrival rate must be between 0 and ${MAX_RATE} per hour`);
        // A workload named twice is one class arriving at the sum of its rates.
        const rates = new Map();
        for (const [name, rate] of mix) rates.set(name, (rates.get(name) || 0) + rate);
        const classes = await Promise.all([...rates].map(([name, rate]) => classOf(name, rate)));
        const fillShare = Number(document.getElementById("p-fill").value);
        if (!(fillShare >= 0.1 && fillShare <= 1)) throw new Error("Fill must be between 0.1 and 1 (the share of each machine the plan may use)");
        const out = await plan({ classes, prices: document.getElementById("p-prices").value, fill: fillShare });
        fill("plan-answer", ...answer(out, await currencyOf(out.price_profile)));
      } catch (err) {
        if (err instanceof Unauthorized) return signOut("Your token was refused; sign in again.");
        fill("plan-answer", h("p", { class: "error", role: "alert" }, err.message));
      }
    });
    setPage("Capacity planner", form, region("plan-answer"));
  }

  window.plannerPage = plannerPage;
})();
