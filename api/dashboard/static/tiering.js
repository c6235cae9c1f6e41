// The workload page's dynamic-tiering panel: the advice of POST /v1/tiering/recommend for the
// workload's latest profile (fast-tier size within τ, migration period trials, knob importance).
// It relies on app.js's globals (state, h, table, pct, bytes) and adds itself after the page renders.
"use strict";

const TIERING_LOSS_TARGET = 0.05;

async function tieringAdvice(name) {
  const response = await fetch("/v1/tiering/recommend", {
    method: "POST",
    headers: { Authorization: `Bearer ${state.token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ workload: name, loss_target: TIERING_LOSS_TARGET }),
  });
  let body = null;
  try { body = await response.json(); } catch (_) { /* not JSON */ }
  return { status: response.status, body };
}

function tieringPanel(advice) {
  const s = advice.sizing, p = advice.period, k = advice.knobs;
  const parts = [
    h("p", {}, h("strong", {}, `Fast tier ${bytes(s.fast_bytes)}`),
      ` (${pct(s.saved_share)} saved), predicted loss ${pct(s.predicted_loss)} against τ = ${pct(s.loss_target)}.`),
    table("Migration period trials, in order (the period in use first: it is the guard)",
      ["trial", "period", "× dominant reuse", "predicted loss"],
      p.trials.map((t, i) => [t.in_use ? `${i + 1} (in use)` : i + 1, fmt.seconds(t.period_seconds),
        Number(t.reuse_multiple.toPrecision(3)), pct(t.predicted_loss)])),
  ];
  if (k) {
    const names = Object.keys(k.best);
    parts.push(table(`Knobs (${k.trials_done} trials so far; the current setting is the guard)`,
      ["knob", "best so far", "next trial", "importance"],
      names.map((n) => [n, String(k.best[n]), k.next_trial ? String(k.next_trial[n]) : "—", pct(k.importance[n] || 0)])));
  }
  parts.push(h("ul", {}, advice.explanation.map((line) => h("li", {}, line))));
  return parts;
}

async function showTiering() {
  const match = location.hash.match(/^#\/workload\/(.+)$/);
  if (!match || !state.token) return;
  const name = decodeURIComponent(match[1]);
  const page = document.getElementById("page");
  for (let i = 0; i < 40 && !page.querySelector("h2")?.textContent.includes(name); i++) {
    await new Promise((r) => setTimeout(r, 50)); // app.js renders the page first
  }
  if (document.getElementById("w-tiering")) return;
  const region = h("div", { id: "w-tiering", "aria-live": "polite" }, "Loading…");
  page.append(h("section", {}, h("h3", {}, "Dynamic tiering"), region));
  const { status, body } = await tieringAdvice(name);
  if (status === 200) region.replaceChildren(...tieringPanel(body));
  else if (status === 403) region.replaceChildren(h("p", {}, "Your token's role may not ask for tiering advice."));
  else if (status === 409) region.replaceChildren(h("p", {}, "No tiering profile for this workload: profile it with `tmc-agent profile --backend trace --tiering -- <program>` to get advice."));
  else region.replaceChildren(h("p", { class: "error" }, `Tiering advice failed: ${status} ${(body && body.detail) || ""}`));
}

window.addEventListener("hashchange", showTiering);
window.addEventListener("load", showTiering);
