// Small SVG charts: no third-party code, every chart labelled for screen readers.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const RESOURCE_COLOURS = { cpu: "#0b5394", dram: "#b45f06", slow: "#38761d", llc: "#741b47" };

function svgEl(tag, attrs, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

function svgRoot(width, height, label) {
  const svg = svgEl("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label });
  svg.appendChild(svgEl("title", {}, label));
  return svg;
}

// Sequential blue scale, light to dark: contrast holds for the text drawn on top.
function heatColour(t) {
  const x = Math.max(0, Math.min(1, t));
  const r = Math.round(235 - 200 * x), g = Math.round(243 - 160 * x), b = Math.round(251 - 100 * x);
  return `rgb(${r},${g},${b})`;
}

// Outlines drawn over a heat-map cell: the decision's pick solid, the cheapest dashed (on the
// same cell the dashes alternate with the solid colour).
const MARK_STYLES = {
  chosen: { stroke: "#e69f00", "stroke-width": 4, inset: 1.5 },
  cheapest: { stroke: "#111", "stroke-width": 2, "stroke-dasharray": "5 3", inset: 1.5 },
};

// rows x cols grid; cell(r, c) returns {value: 0..1 for the colour, text, title, marks: ["chosen", "cheapest"]} or null.
function heatmap({ rows, cols, cell, label, rowLabel, colLabel, cellW = 44, cellH = 22 }) {
  const left = 70, top = 34;
  const svg = svgRoot(left + cols.length * cellW + 10, top + rows.length * cellH + 10, label);
  svg.appendChild(svgEl("text", { x: left, y: 12 }, colLabel));
  svg.appendChild(svgEl("text", { x: 2, y: 12 }, rowLabel));
  cols.forEach((c, j) => svg.appendChild(svgEl("text", { x: left + j * cellW + cellW / 2, y: top - 6, "text-anchor": "middle" }, String(c))));
  const overlays = [];
  rows.forEach((r, i) => {
    svg.appendChild(svgEl("text", { x: left - 6, y: top + i * cellH + cellH * 0.68, "text-anchor": "end" }, String(r)));
    cols.forEach((c, j) => {
      const v = cell(i, j);
      const g = svgEl("g");
      const rect = svgEl("rect", {
        x: left + j * cellW, y: top + i * cellH, width: cellW - 1, height: cellH - 1,
        fill: v ? heatColour(v.value) : "#f0f0f0", "data-cell": "1",
      });
      for (const mark of (v && v.marks) || []) {
        rect.setAttribute(`data-${mark}`, "1");
        const { inset, ...style } = MARK_STYLES[mark];
        overlays.push(svgEl("rect", { ...style, fill: "none", "data-mark": mark,
          x: left + j * cellW + inset, y: top + i * cellH + inset, width: cellW - 1 - 2 * inset, height: cellH - 1 - 2 * inset }));
      }
      g.appendChild(rect);
      if (v) {
        g.appendChild(svgEl("title", {}, v.title));
        g.appendChild(svgEl("text", {
          x: left + j * cellW + cellW / 2, y: top + i * cellH + cellH * 0.68, "text-anchor": "middle",
          fill: v.value > 0.55 ? "#fff" : "#111",
        }, v.text));
      }
      svg.appendChild(g);
    });
  });
  // Drawn last, so a neighbouring cell never covers an outline.
  for (const o of overlays) svg.appendChild(o);
  return svg;
}

// series: {name: [[t, value 0..1], ...]}; a line per resource over time.
function lineChart({ series, label, width = 560, height = 200 }) {
  const left = 36, right = 10, top = 10, bottom = 24;
  const svg = svgRoot(width, height, label);
  const all = Object.values(series).flat();
  const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const y = (v) => top + (1 - v) * (height - top - bottom);
  for (const v of [0, 0.5, 1]) {
    svg.appendChild(svgEl("line", { x1: left, x2: width - right, y1: y(v), y2: y(v), stroke: "#ccc" }));
    svg.appendChild(svgEl("text", { x: 2, y: y(v) + 4 }, `${v * 100}%`));
  }
  svg.appendChild(svgEl("text", { x: left, y: height - 6 }, new Date(t0).toLocaleTimeString()));
  svg.appendChild(svgEl("text", { x: width - right, y: height - 6, "text-anchor": "end" }, new Date(t1).toLocaleTimeString()));
  for (const [name, points] of Object.entries(series)) {
    const d = points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    const line = svgEl("polyline", { points: d, fill: "none", stroke: RESOURCE_COLOURS[name] || "#000", "stroke-width": 2.5, "data-series": name });
    line.appendChild(svgEl("title", {}, `${name}: ${(points[points.length - 1][1] * 100).toFixed(1)}% now`));
    svg.appendChild(line);
    for (const p of points) svg.appendChild(svgEl("circle", { cx: x(p[0]), cy: y(p[1]), r: 2.5, fill: RESOURCE_COLOURS[name] || "#000" }));
  }
  return svg;
}

const tickText = new Intl.NumberFormat("en-US", { maximumFractionDigits: 6 });
const OFF_SCALE_QUANTILE = 0.9;

// The upper end of an axis: the points that matter (frontier, chosen) fill at least half of it;
// beyond that, at most 90 % of the rest. The others are outliers that would squash the frontier
// into a corner: they are drawn at the edge instead.
function clippedMax(values, mustShow) {
  const sorted = [...values].sort((a, b) => a - b);
  const lo = sorted[0], focus = Math.max(...mustShow);
  const q = sorted[Math.floor(OFF_SCALE_QUANTILE * (sorted.length - 1))];
  return Math.min(sorted[sorted.length - 1], Math.max(focus, Math.min(q, lo + 2 * (focus - lo))));
}

// points: [{x, y, label, onFrontier, chosen}]: time (s) against cost (in `currency`). Both axes
// have ticks and units; points beyond the clipped range are drawn as arrows at the edge.
function scatter({ points, label, xLabel, xUnit, yLabel, currency, width = 620, height = 330 }) {
  const left = 70, right = 30, top = 24, bottom = 44;
  const svg = svgRoot(width, height, label);
  const must = points.filter((p) => p.onFrontier || p.chosen);
  const xs = points.map((p) => p.x), ys = points.map((p) => p.y);
  const x0 = Math.min(...xs), y0 = Math.min(...ys);
  const x1 = clippedMax(xs, must.map((p) => p.x)), y1 = clippedMax(ys, must.map((p) => p.y));
  const padX = (x1 - x0) * 0.04 || Math.abs(x0) * 0.05 || 1, padY = (y1 - y0) * 0.04 || Math.abs(y0) * 0.05 || 1;
  const [lx, hx, ly, hy] = [x0 - padX, x1 + padX, y0 - padY, y1 + padY];
  const plotR = width - right, plotB = height - bottom;
  const sx = (v) => left + ((Math.min(v, hx) - lx) / (hx - lx)) * (plotR - left);
  const sy = (v) => top + (1 - (Math.min(v, hy) - ly) / (hy - ly)) * (plotB - top);
  const [yScale, yPrefix] = window.fmt.moneyPrefix(hy);
  svg.appendChild(svgEl("line", { x1: left, x2: plotR, y1: plotB, y2: plotB, stroke: "#888" }));
  svg.appendChild(svgEl("line", { x1: left, x2: left, y1: top, y2: plotB, stroke: "#888" }));
  for (const t of window.fmt.niceTicks(lx, hx, 6)) {
    svg.appendChild(svgEl("line", { x1: sx(t), x2: sx(t), y1: plotB, y2: plotB + 5, stroke: "#888" }));
    svg.appendChild(svgEl("text", { x: sx(t), y: plotB + 17, "text-anchor": "middle", class: "tick-x" }, tickText.format(t)));
  }
  for (const t of window.fmt.niceTicks(ly / yScale, hy / yScale, 5)) {
    svg.appendChild(svgEl("line", { x1: left - 5, x2: plotR, y1: sy(t * yScale), y2: sy(t * yScale), stroke: "#e3e3e3" }));
    svg.appendChild(svgEl("text", { x: left - 8, y: sy(t * yScale) + 4, "text-anchor": "end", class: "tick-y" }, tickText.format(t)));
  }
  svg.appendChild(svgEl("text", { x: (left + plotR) / 2, y: height - 6, "text-anchor": "middle", class: "axis-x" }, `${xLabel} (${xUnit})`));
  svg.appendChild(svgEl("text", { x: 14, y: (top + plotB) / 2, "text-anchor": "middle", transform: `rotate(-90 14 ${(top + plotB) / 2})`, class: "axis-y" },
    `${yLabel} (${yPrefix}${currency})`));
  const frontier = points.filter((p) => p.onFrontier).sort((a, b) => a.x - b.x);
  if (frontier.length > 1) {
    svg.appendChild(svgEl("polyline", { points: frontier.map((p) => `${sx(p.x)},${sy(p.y)}`).join(" "), fill: "none", stroke: "#b45f06", "stroke-width": 2 }));
  }
  let offScale = 0;
  // Chosen last, so it is drawn on top of the rest.
  for (const p of [...points].sort((a, b) => Number(a.chosen) - Number(b.chosen))) {
    const cx = sx(p.x), cy = sy(p.y), off = p.x > hx || p.y > hy;
    const fill = p.chosen ? "#e69f00" : p.onFrontier ? "#b45f06" : "#9fb7d0";
    let mark;
    if (off) {
      offScale++;
      // An arrow at the edge, pointing the way the point lies.
      const angle = p.x > hx && p.y > hy ? -45 : p.x > hx ? 0 : -90;
      mark = svgEl("path", { d: "M -5 -5 L 6 0 L -5 5 Z", transform: `translate(${cx} ${cy}) rotate(${angle})`, fill: "#5b7fa6", "data-point": "1", "data-offscale": "1" });
    } else {
      mark = svgEl("circle", { cx, cy, r: p.chosen ? 7 : p.onFrontier ? 4.5 : 3, fill, stroke: p.chosen ? "#111" : "none", "data-point": "1" });
    }
    if (p.chosen) mark.setAttribute("data-chosen", "1");
    mark.appendChild(svgEl("title", {}, p.label + (off ? " (off scale)" : "")));
    svg.appendChild(mark);
  }
  if (offScale) {
    svg.appendChild(svgEl("text", { x: plotR, y: 14, "text-anchor": "end", class: "offscale-note" },
      `axes clipped around the frontier: ${offScale} point(s) beyond, drawn at the edge (▶)`));
  }
  return svg;
}

const BAR_COLOURS = ["#0b5394", "#e69f00", "#38761d", "#a40000"];

// Horizontal grouped bars: a row per group, a bar per series, a value axis with ticks and its
// unit in `axis`. series: [{name, values: [one per group]}]; format(value) labels ticks and bars.
function bars({ groups, series, label, axis, format, width = 640 }) {
  const left = 170, right = 64, top = 8, bottom = 42, barH = 10, gap = 8;
  const groupH = series.length * barH + gap;
  const height = top + groups.length * groupH + bottom;
  const svg = svgRoot(width, height, label);
  svg.dataset.series = series.map((s) => s.name).join(",");
  const all = series.flatMap((s) => s.values).filter(Number.isFinite);
  const ticks = window.fmt.niceTicks(Math.min(0, ...all), Math.max(0, ...all) || 1, 5);
  // The axis ends on a tick beyond the longest bar.
  const step = ticks.length > 1 ? ticks[1] - ticks[0] : 1;
  while (ticks[ticks.length - 1] < Math.max(...all)) ticks.push(Number((ticks[ticks.length - 1] + step).toPrecision(12)));
  const lo = Math.min(ticks[0], 0, ...all), hi = Math.max(ticks[ticks.length - 1], ...all);
  const sx = (v) => left + ((v - lo) / (hi - lo || 1)) * (width - left - right);
  const plotB = height - bottom;
  for (const t of ticks) {
    svg.appendChild(svgEl("line", { x1: sx(t), x2: sx(t), y1: top, y2: plotB + 4, stroke: t === 0 ? "#888" : "#e3e3e3" }));
    svg.appendChild(svgEl("text", { x: sx(t), y: plotB + 16, "text-anchor": "middle", class: "tick-x" }, format(t)));
  }
  svg.appendChild(svgEl("text", { x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle", class: "axis-x" }, axis));
  groups.forEach((g, i) => {
    const y = top + i * groupH;
    svg.appendChild(svgEl("text", { x: left - 8, y: y + (series.length * barH) / 2 + 4, "text-anchor": "end" }, g));
    series.forEach((s, k) => {
      const v = s.values[i];
      if (!Number.isFinite(v)) return;
      const x0 = sx(Math.min(0, v)), x1 = sx(Math.max(0, v));
      const bar = svgEl("rect", { x: x0, y: y + k * barH, width: Math.max(1, x1 - x0), height: barH - 1, fill: BAR_COLOURS[k % BAR_COLOURS.length], "data-bar": s.name });
      bar.appendChild(svgEl("title", {}, `${g}, ${s.name}: ${format(v)}`));
      svg.appendChild(bar);
      svg.appendChild(svgEl("text", { x: x1 + 4, y: y + k * barH + barH - 2, class: "bar-value" }, format(v)));
    });
  });
  return svg;
}

// Labels are laid out before their width is known (a long kind or workload name, a wide tick): once
// a chart is on the page, its view box grows to hold everything drawn, so no label is cut off.
function fitToContent(svg) {
  if (!svg.isConnected || svg.dataset.fitted) return;
  let box;
  try { box = svg.getBBox(); } catch (_) { return; } // not rendered (a closed <details>)
  if (!box.width && !box.height) return;
  const [vx, vy, vw, vh] = svg.getAttribute("viewBox").split(/\s+/).map(Number);
  const margin = 2;
  const x0 = Math.min(vx, box.x - margin), y0 = Math.min(vy, box.y - margin);
  const x1 = Math.max(vx + vw, box.x + box.width + margin), y1 = Math.max(vy + vh, box.y + box.height + margin);
  const w = Math.ceil(x1 - x0), hgt = Math.ceil(y1 - y0);
  svg.setAttribute("viewBox", `${Math.floor(x0)} ${Math.floor(y0)} ${w} ${hgt}`);
  svg.setAttribute("width", w);
  svg.setAttribute("height", hgt);
  svg.dataset.fitted = "1";
}

function fitCharts(root) {
  for (const svg of (root || document).querySelectorAll("svg[role=img]")) fitToContent(svg);
}

window.charts = { heatmap, lineChart, scatter, bars, heatColour, fitCharts, RESOURCE_COLOURS, BAR_COLOURS };
