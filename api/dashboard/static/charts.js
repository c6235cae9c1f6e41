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

// rows x cols grid; cell(r, c) returns {value: 0..1 for the colour, text, title} or null.
function heatmap({ rows, cols, cell, label, rowLabel, colLabel, cellW = 44, cellH = 22 }) {
  const left = 70, top = 34;
  const svg = svgRoot(left + cols.length * cellW + 10, top + rows.length * cellH + 10, label);
  svg.appendChild(svgEl("text", { x: left, y: 12 }, colLabel));
  svg.appendChild(svgEl("text", { x: 2, y: 12 }, rowLabel));
  cols.forEach((c, j) => svg.appendChild(svgEl("text", { x: left + j * cellW + cellW / 2, y: top - 6, "text-anchor": "middle" }, String(c))));
  rows.forEach((r, i) => {
    svg.appendChild(svgEl("text", { x: left - 6, y: top + i * cellH + cellH * 0.68, "text-anchor": "end" }, String(r)));
    cols.forEach((c, j) => {
      const v = cell(i, j);
      const g = svgEl("g");
      const rect = svgEl("rect", {
        x: left + j * cellW, y: top + i * cellH, width: cellW - 1, height: cellH - 1,
        fill: v ? heatColour(v.value) : "#f0f0f0", "data-cell": "1",
      });
      if (v && v.highlight) { rect.setAttribute("stroke", "#e69f00"); rect.setAttribute("stroke-width", "3"); }
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

// points: [{x, y, label, onFrontier, chosen}], time (s) against cost.
function scatter({ points, label, xLabel, yLabel, width = 560, height = 300 }) {
  const left = 64, right = 14, top = 12, bottom = 36;
  const svg = svgRoot(width, height, label);
  const xs = points.map((p) => p.x), ys = points.map((p) => p.y);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)], [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const sx = (v) => left + ((v - x0) / (x1 - x0 || 1)) * (width - left - right);
  const sy = (v) => top + (1 - (v - y0) / (y1 - y0 || 1)) * (height - top - bottom);
  svg.appendChild(svgEl("line", { x1: left, x2: width - right, y1: height - bottom, y2: height - bottom, stroke: "#888" }));
  svg.appendChild(svgEl("line", { x1: left, x2: left, y1: top, y2: height - bottom, stroke: "#888" }));
  svg.appendChild(svgEl("text", { x: (left + width) / 2, y: height - 6, "text-anchor": "middle" }, xLabel));
  svg.appendChild(svgEl("text", { x: 4, y: top + 8 }, yLabel));
  svg.appendChild(svgEl("text", { x: left, y: height - bottom + 14 }, x0.toPrecision(3)));
  svg.appendChild(svgEl("text", { x: width - right, y: height - bottom + 14, "text-anchor": "end" }, x1.toPrecision(3)));
  const frontier = points.filter((p) => p.onFrontier).sort((a, b) => a.x - b.x);
  if (frontier.length > 1) {
    svg.appendChild(svgEl("polyline", { points: frontier.map((p) => `${sx(p.x)},${sy(p.y)}`).join(" "), fill: "none", stroke: "#b45f06", "stroke-width": 2 }));
  }
  for (const p of points) {
    const c = svgEl("circle", {
      cx: sx(p.x), cy: sy(p.y), r: p.chosen ? 7 : p.onFrontier ? 4.5 : 3,
      fill: p.chosen ? "#e69f00" : p.onFrontier ? "#b45f06" : "#9fb7d0", stroke: p.chosen ? "#111" : "none", "data-point": "1",
    });
    c.appendChild(svgEl("title", {}, p.label));
    svg.appendChild(c);
  }
  return svg;
}

window.charts = { heatmap, lineChart, scatter, heatColour, RESOURCE_COLOURS };
