// The capacity planner: a workload mix with arrival rates, sent to POST /v1/planner/capacity (a dry
// run: nothing is stored). Each workload's options are its latest decision's candidates within T,
// with their predicted time and cost, as `tmc plan capacity` builds them. The machine kinds are
// Fig. 9's family, the cluster's registered host kinds, or the operator's own; the prices are a
// price profile by its one name (name@version). Relies on app.js's globals.
"use strict";

(() => {
  const MAX_OPTIONS = 128; // per class, as the API bounds them
  const MAX_RATE = 1e7;
  const DEFAULT_RATE = 3600;
  // The API's default and `tmc plan capacity --fill`'s: a plan may fill each machine entirely.
  const DEFAULT_FILL = 1;
  const GIB = 2 ** 30;
  // The price profiles shipped with tmc, by their key, and the source the planner names them by
  // when the service has not stored them.
  const SHIPPED_PRICES = [["paper-3dxp@1", "gce-n1"], ["msv2-lsq@1", "msv2-lsq"]];
  let rowSeq = 0;
  let kindSeq = 0;

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

  function kindRow(kind) {
    const id = ++kindSeq;
    const field = (cls, label, attrs) => [h("label", { for: `k-${cls}-${id}` }, label), h("input", { id: `k-${cls}-${id}`, class: `k-${cls}`, required: true, ...attrs })];
    const row = h("div", { class: "kind-row", "data-row": id },
      field("name", "Machine kind", { type: "text", maxlength: "64", size: 12, value: kind.name }),
      field("cpus", " CPUs", { type: "number", min: "1", max: "4096", step: "1", size: 5, value: String(kind.cpus) }),
      field("dram", " DRAM GiB", { type: "number", min: "1", step: "any", size: 6, value: String(kind.dram_gib) }),
      field("slow", " slow GiB", { type: "number", min: "0", step: "any", size: 6, value: String(kind.slow_gib) }),
      h("label", { for: `k-where-${id}` }, " slow memory"),
      h("select", { id: `k-where-${id}`, class: "k-where" }, h("option", { value: "local", selected: !kind.pooled }, "local (L)"), h("option", { value: "pool", selected: kind.pooled }, "a rack pool (P), this machine's share")),
      field("ways", " LLC ways", { type: "number", min: "1", max: "64", step: "1", size: 4, value: String(kind.llc_ways) }),
      h("button", { type: "button", "aria-label": `Remove machine kind row ${id}`, onclick: () => { if (document.querySelectorAll(".kind-row").length > 1) row.remove(); } }, "Remove"));
    return row;
  }

  // The operator's kinds as the API takes them; every bad value is named.
  function ownKinds() {
    return [...document.querySelectorAll(".kind-row")].map((r) => {
      const v = (cls) => r.querySelector(`.k-${cls}`).value.trim();
      const name = v("name");
      if (!name) throw new Error("Every machine kind needs a name (e.g. 64G-512L)");
      const cpus = Number(v("cpus")), dram = Number(v("dram")), slow = Number(v("slow")), ways = Number(v("ways"));
      if (!(Number.isInteger(cpus) && cpus >= 1 && cpus <= 4096)) throw new Error(`${name}: CPUs must be a whole number from 1 to 4096`);
      if (!(dram > 0 && dram <= 16384)) throw new Error(`${name}: DRAM must be above 0 and at most 16384 GiB`);
      if (!(slow >= 0 && slow <= 16384)) throw new Error(`${name}: slow memory must be between 0 and 16384 GiB`);
      if (!(Number.isInteger(ways) && ways >= 1 && ways <= 64)) throw new Error(`${name}: LLC ways must be a whole number from 1 to 64`);
      const slowBytes = Math.round(slow * GIB);
      const pooled = r.querySelector(".k-where").value === "pool";
      // A pooled kind's slow memory is this machine's share: a rack of one holds exactly it.
      return { name, cpus, dram_bytes: Math.round(dram * GIB), llc_ways: ways, local_slow_bytes: pooled ? 0 : slowBytes, pool_bytes: pooled ? slowBytes : 0, rack_nodes: 1 };
    });
  }

  // The cluster's registered host kinds (GET /v1/cluster/host-kinds) as machine kinds, with the
  // sockets, LLC size and slow tier they state, so that profiles of another cache are carried over.
  async function clusterKinds() {
    const registered = await api("/v1/cluster/host-kinds");
    if (!registered.length) throw new Error("This cluster has no registered host kinds yet (PUT /v1/cluster/host-kinds, or nodes that register theirs).");
    return registered.slice(0, 16).map((k) => ({
      name: k.name.slice(0, 64), cpus: k.machine.cpus, dram_bytes: k.machine.dram_bytes, llc_ways: k.machine.llc_ways,
      local_slow_bytes: k.machine.slow_pooled ? 0 : k.machine.slow_bytes, pool_bytes: k.machine.slow_pooled ? k.machine.slow_bytes : 0, rack_nodes: 1,
      sockets: k.sockets ?? 1, llc_size_bytes: k.llc_size_bytes ?? null, slow_tier: k.slow_tier ?? null,
    }));
  }

  function legend() {
    const term = (t, ...d) => [h("dt", {}, t), h("dd", {}, ...d)];
    return h("details", { id: "planner-legend", open: true }, h("summary", {}, "What the terms mean"),
      h("dl", { class: "terms" },
        term("machine kind, e.g. 24G-128P or 24G-128L", "24 GiB of DRAM and 128 GiB of slow memory: L when the slow memory is the machine's own, P when it is a pool shared by a rack of 8 machines (each holds an eighth). Fig. 9's kinds have 12 CPUs and 48 LLC ways."),
        term("Fig. 9's family", "The twelve machine kinds the TMC paper compares in its Fig. 9: 24 or 48 GiB of DRAM with 128L, 256L, 128P, 384P, 640P or 896P of slow memory."),
        term("this cluster's host kinds", "The host kinds registered with the service (GET /v1/cluster/host-kinds), as their nodes report them."),
        term("greedy", "How many machines first-fit decreasing needs with every workload in its cheapest option: the simple rule the plan is compared with."),
        term("tenants pay", "What the workloads' tenants are charged per hour: each run's cost at the price profile, times its arrivals per hour."),
        term("binding", "The resource that fills first on that machine kind."),
        term("fill", "The share of each machine's resources a plan may use: 1 fills machines entirely (the default here, in the API and in tmc plan capacity --fill)."),
        term("prices", "A price profile by its name@version (GET /v1/price-profiles): its unit prices give each machine kind's price per hour.")));
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
    const [workloads, decisions, stored] = await Promise.all([api("/v1/workloads?limit=500"), api("/v1/recommendations?limit=500"), api("/v1/price-profiles")]);
    const storedKeys = new Set(stored.map((p) => p.key));
    const defaultKey = (stored.find((p) => p.is_default) || { key: SHIPPED_PRICES[0][0] }).key;
    const priceChoices = [...stored.map((p) => [p.key, null]), ...SHIPPED_PRICES.filter(([key]) => !storedKeys.has(key))];
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
        h("select", { id: "p-prices" }, priceChoices.map(([key, source]) => h("option", { value: key, "data-source": source, selected: key === defaultKey }, key))),
        h("label", { for: "p-fill" }, " Fill"),
        h("input", { id: "p-fill", type: "number", min: "0.1", max: "1", step: "0.05", value: String(DEFAULT_FILL), size: 5 })),
      h("p", {}, h("label", { for: "p-kinds" }, "Machine kinds"),
        h("select", { id: "p-kinds" },
          h("option", { value: "fig9" }, "Fig. 9's family (the paper's twelve)"),
          h("option", { value: "cluster" }, "this cluster's host kinds"),
          h("option", { value: "own" }, "my own machine kinds (below)"))),
      h("div", { id: "kind-rows", hidden: true },
        kindRow({ name: "my-64G-256L", cpus: 16, dram_gib: 64, slow_gib: 256, pooled: false, llc_ways: 48 }),
        h("p", {}, h("button", { type: "button", id: "k-add", onclick: () => document.getElementById("kind-rows").insertBefore(kindRow({ name: "", cpus: 12, dram_gib: 24, slow_gib: 128, pooled: false, llc_ways: 48 }), document.getElementById("k-add").parentElement) }, "Add machine kind"))),
      h("p", {}, h("button", { type: "submit" }, "Plan")));
    form.querySelector("#p-kinds").addEventListener("change", (e) => { document.getElementById("kind-rows").hidden = e.target.value !== "own"; });
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
        const which = document.getElementById("p-kinds").value;
        const kinds = which === "own" ? ownKinds() : which === "cluster" ? await clusterKinds() : null;
        const chosen = document.getElementById("p-prices").selectedOptions[0];
        // A stored profile is named by its key; a shipped one not stored yet by its source.
        const prices = chosen.dataset.source ? { prices: chosen.dataset.source } : { price_profile: chosen.value };
        const out = await plan({ classes, ...prices, fill: fillShare, ...(kinds ? { kinds } : {}) });
        fill("plan-answer", ...answer(out, await currencyOf(out.price_profile)));
      } catch (err) {
        if (err instanceof Unauthorized) return signOut("Your token was refused; sign in again.");
        fill("plan-answer", h("p", { class: "error", role: "alert" }, err.message));
      }
    });
    setPage("Capacity planner", form, legend(), region("plan-answer"));
  }

  window.plannerPage = plannerPage;
})();
