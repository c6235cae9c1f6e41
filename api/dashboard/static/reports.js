// Reports (docs/reports, served by /v1/reports) as pages: the markdown rendered (headings, tables,
// lists, code, links), its PNG plots shown in place, and SVG plots drawn from the JSON data of the
// report kinds tmc writes. Relies on app.js's globals (state, api, h, table, setPage, region, fill).
"use strict";

(() => {
  const reportHref = (name) => `#/report/${encodeURIComponent(name)}`;
  const dirOf = (name) => (name.includes("/") ? name.slice(0, name.lastIndexOf("/") + 1) : "");

  // Resolve a relative link of a report against its folder ("../" and "./" included).
  function resolve(base, target) {
    const parts = (dirOf(base) + target).split("/");
    const out = [];
    for (const p of parts) {
      if (p === "..") out.pop();
      else if (p !== "." && p !== "") out.push(p);
    }
    return out.join("/");
  }

  // A plot is served by the API behind the token: fetched, then shown from a blob URL.
  function plotImage(name, alt) {
    const img = h("img", { alt, "data-report-image": name });
    fetch(`/v1/reports/${name.split("/").map(encodeURIComponent).join("/")}`, { headers: { Authorization: `Bearer ${state.token}` } })
      .then((r) => (r.ok ? r.blob() : Promise.reject(new Error(`${r.status}`))))
      .then((blob) => { img.src = URL.createObjectURL(blob); })
      .catch((err) => img.replaceWith(h("p", { class: "error" }, `Plot ${name} could not be loaded (${err.message}).`)));
    return h("figure", {}, img, h("figcaption", {}, alt));
  }

  // -- markdown: the subset reports use, built as DOM nodes (report text never becomes HTML) --

  const INLINE = /(!?)\[([^\]]*)\]\(([^)\s]+)\)|`([^`]+)`|\*\*([^*]+)\*\*|(?<![\w*])[*_]([^*_]+)[*_](?![\w*])/g;

  function inline(text, ctx) {
    const out = [];
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) out.push(text.slice(last, m.index));
      last = m.index + m[0].length;
      if (m[3] !== undefined) out.push(link(m[1] === "!", m[2], m[3], ctx));
      else if (m[4] !== undefined) out.push(h("code", {}, m[4]));
      else if (m[5] !== undefined) out.push(h("strong", {}, ...inline(m[5], ctx)));
      else out.push(h("em", {}, m[6]));
    }
    if (last < text.length) out.push(text.slice(last));
    return out;
  }

  function link(isImage, text, target, ctx) {
    if (/^https?:\/\//.test(target)) return h("a", { href: target, rel: "noopener noreferrer" }, text);
    const name = resolve(ctx.name, target.split("#")[0]);
    if (/\.(png|svg)$/i.test(name) && ctx.known.has(name)) {
      const plot = { id: `plot-${ctx.plots.length + 1}`, name, alt: text || name, embedded: isImage };
      ctx.plots.push(plot);
      if (isImage) return plotImage(name, plot.alt);
      // The plot is shown at the end of the page; the link scrolls there (a hash would change page).
      return h("a", { href: "#", onclick: (e) => { e.preventDefault(); document.getElementById(plot.id)?.scrollIntoView(); } }, text);
    }
    if (ctx.known.has(name)) return h("a", { href: reportHref(name) }, text);
    return h("span", { title: target }, text); // a file outside the reports: named, not linked
  }

  const isTableRow = (line) => /^\s*\|.*\|\s*$/.test(line);
  const cellsOf = (line) => line.trim().replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));

  function markdownTable(lines, ctx) {
    const head = cellsOf(lines[0]);
    const align = cellsOf(lines[1]).map((c) => (/^:-+:$/.test(c) ? "center" : /-+:$/.test(c) ? "right" : "left"));
    const rows = lines.slice(2).map(cellsOf);
    const style = (j) => `text-align:${align[j] || "left"}`;
    return h("div", { class: "table-wrap" }, h("table", { class: "report-table" },
      h("thead", {}, h("tr", {}, head.map((c, j) => h("th", { scope: "col", style: style(j) }, ...inline(c, ctx))))),
      h("tbody", {}, rows.map((r) => h("tr", {}, head.map((_, j) => h("td", { style: style(j) }, ...inline(r[j] || "", ctx))))))));
  }

  function markdown(text, ctx) {
    const lines = text.replace(/\r\n?/g, "\n").split("\n");
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (/^\s*$/.test(line)) { i++; continue; }
      if ((m = line.match(/^```/))) {
        const code = [];
        for (i++; i < lines.length && !/^```/.test(lines[i]); i++) code.push(lines[i]);
        i++;
        out.push(h("pre", {}, code.join("\n")));
      } else if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
        // The page has its own h2: a report's headings start one level below.
        out.push(h(`h${Math.min(6, m[1].length + 2)}`, {}, ...inline(m[2], ctx)));
        i++;
      } else if (isTableRow(line) && i + 1 < lines.length && /^\s*\|?\s*:?-+/.test(lines[i + 1])) {
        const rows = [];
        while (i < lines.length && isTableRow(lines[i])) rows.push(lines[i++]);
        out.push(markdownTable(rows, ctx));
      } else if (/^\s*([-*]|\d+\.)\s+/.test(line)) {
        const ordered = /^\s*\d+\./.test(line);
        const items = [];
        while (i < lines.length && /^\s*([-*]|\d+\.)\s+/.test(lines[i])) {
          let item = lines[i++].replace(/^\s*([-*]|\d+\.)\s+/, "");
          while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !/^\s*([-*]|\d+\.)\s+/.test(lines[i])) item += " " + lines[i++].trim();
          items.push(h("li", {}, ...inline(item, ctx)));
        }
        out.push(h(ordered ? "ol" : "ul", {}, items));
      } else if (/^>\s?/.test(line)) {
        const quote = [];
        while (i < lines.length && /^>\s?/.test(lines[i])) quote.push(lines[i++].replace(/^>\s?/, ""));
        out.push(h("blockquote", {}, ...inline(quote.join(" "), ctx)));
      } else if (/^(-{3,}|\*{3,})\s*$/.test(line)) {
        out.push(h("hr")); i++;
      } else {
        const para = [];
        while (i < lines.length && !/^\s*$/.test(lines[i]) && !/^(#{1,6}\s|```|>|\s*([-*]|\d+\.)\s)/.test(lines[i]) && !isTableRow(lines[i])) para.push(lines[i++]);
        out.push(h("p", {}, ...inline(para.join(" "), ctx)));
      }
    }
    return out;
  }

  // -- plots drawn from the data of the report kinds tmc writes --------------------------------

  const pctAxis = fmt.percent;

  const KNOWN = {
    "tmc.bench/v1": (d) => Object.entries(d.workloads || {}).flatMap(([host, rows]) => [
      charts.bars({
        label: `Cost over exhaustive search (ES) per workload, ${host} host: tmc and Bayesian optimisation`,
        groups: rows.map((r) => r.workload), axis: "cost over ES (%)", format: pctAxis,
        series: [{ name: "tmc", values: rows.map((r) => r.tmc.cost_vs_es) }, { name: "BO", values: rows.map((r) => r.bo.cost_vs_es) }],
      }),
      charts.bars({
        label: `Profiling runs to decide per workload, ${host} host: tmc, BO and ES`,
        groups: rows.map((r) => r.workload), axis: "profiling runs",
        series: [{ name: "tmc", values: rows.map((r) => r.tmc.runs) }, { name: "BO", values: rows.map((r) => r.bo.runs) }, { name: "ES", values: rows.map((r) => r.es.runs) }],
        format: fmt.number,
      }),
    ]),
    "tmc.bench.tiering/v1": (d) => {
      const groups = [...new Set((d.sizing || []).map((r) => `${r.workload} on ${r.host}`))];
      const mean = (key) => groups.map((g) => {
        const rows = d.sizing.filter((r) => `${r.workload} on ${r.host}` === g);
        return rows.reduce((a, r) => a + r[key], 0) / rows.length;
      });
      return [charts.bars({
        label: "Fast memory saved at the loss target per workload and host (mean over seeds): advised and the oracle's",
        groups, axis: "fast memory saved (% of the footprint)", format: pctAxis,
        series: [{ name: "advised", values: mean("saved_share") }, { name: "oracle", values: mean("oracle_saved_share") }],
      })];
    },
  };

  function dataPlots(data) {
    const draw = data && KNOWN[data.schema];
    if (!draw) return [];
    try {
      return draw(data).map((svg) => h("figure", { class: "data-plot" },
        h("figcaption", {}, svg.getAttribute("aria-label"), h("span", { class: "legend" },
          svg.dataset.series.split(",").map((s, k) => [h("span", { style: `background:${charts.BAR_COLOURS[k]}` }), s]))), svg));
    } catch (err) {
      // A report of a newer shape: the text still renders, without these plots.
      return [h("p", { class: "flag" }, `The plots could not be drawn from ${data.schema}: ${err.message}`)];
    }
  }

  async function jsonOf(name) {
    try { return JSON.parse((await api(`/v1/reports/${name.split("/").map(encodeURIComponent).join("/")}`)).text); }
    catch (err) { if (err instanceof Unauthorized) throw err; return null; }
  }

  async function reportPage(name) {
    setPage(`Report ${name}`, h("p", {}, h("a", { href: "#/reports" }, "← all reports")), region("report-body"));
    const [listed, body] = await Promise.all([api("/v1/reports"), api(`/v1/reports/${name.split("/").map(encodeURIComponent).join("/")}`)]);
    const known = new Set(listed.map((r) => r.name));
    const ctx = { name, known, plots: [] };
    const parts = [];
    if (body.format === "markdown") {
      const page = markdown(body.text, ctx);
      const companion = name.replace(/\.md$/, ".json");
      const plots = known.has(companion) ? dataPlots(await jsonOf(companion)) : [];
      if (plots.length) {
        // After the report's title and introduction, before its first section.
        const at = page.findIndex((el, k) => k > 0 && el.tagName === "H4");
        page.splice(at < 0 ? page.length : at, 0, h("section", { class: "report-plots" }, h("h4", {}, "Plots from the report's data"), plots));
      }
      parts.push(h("article", { class: "report" }, page));
      // Plots the text links to (rather than embeds) are shown at the end, in the order linked.
      const linked = ctx.plots.filter((p) => !p.embedded);
      if (linked.length) parts.push(h("section", { class: "report-plots" }, h("h3", {}, "Plots"), linked.map((p) => h("div", { id: p.id }, plotImage(p.name, p.alt)))));
    } else if (body.format === "json") {
      let data = null;
      try { data = JSON.parse(body.text); } catch (_) { /* shown as text below */ }
      const plots = dataPlots(data);
      if (plots.length) parts.push(h("section", { class: "report-plots" }, plots));
      if (data && typeof data === "object" && !Array.isArray(data)) {
        const scalars = Object.entries(data).filter(([, v]) => v === null || typeof v !== "object");
        if (scalars.length) parts.push(table("Fields", ["field", "value"], scalars.map(([k, v]) => [k, fmt.field(k, v)])));
      }
      parts.push(h("details", {}, h("summary", {}, "The data as JSON"), h("pre", {}, data ? JSON.stringify(data, null, 2) : body.text)));
    } else {
      parts.push(h("pre", {}, body.text));
    }
    fill("report-body", ...parts);
  }

  async function reportList() {
    setPage("Reports", region("report-list"));
    state.refreshData = async () => {
      const reports = (await api("/v1/reports")).filter((r) => r.format !== "image");
      fill("report-list", reports.length
        ? table(`${reports.length} reports`, ["report", "kind", "size", "updated"], reports.map((r) => [
          h("a", { href: reportHref(r.name) }, r.name), r.format, fmt.bytes(r.size_bytes),
          h("time", { datetime: r.modified, title: r.modified_from === "commit" ? "the last commit that changed it" : "the file's modification time" }, fmt.when(r.modified))]))
        : h("p", {}, "No reports yet: run ./dev bench."));
    };
  }

  window.reportPages = { list: reportList, page: reportPage, markdown };
})();
