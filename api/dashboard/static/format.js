// Numbers a person can read: sizes in the largest binary unit that keeps them at least 1, money and
// times to a fixed number of significant figures with their unit, never an exponent. A number and
// its unit are joined by a no-break space so a table cell never wraps between them.
"use strict";

(() => {

const NBSP = "\u00a0";
const SIGNIFICANT = 3;
const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
// Metric prefixes for small amounts of money: a run costs well under a cent.
const MONEY_PREFIXES = [[1, ""], [1e-3, "m"], [1e-6, "µ"], [1e-9, "n"], [1e-12, "p"]];
const sig = new Intl.NumberFormat("en-US", { maximumSignificantDigits: SIGNIFICANT, minimumSignificantDigits: SIGNIFICANT });
const plain = new Intl.NumberFormat("en-US", { maximumSignificantDigits: SIGNIFICANT });

function sigFigs(x) { return sig.format(x); }
// Up to three significant figures without trailing zeros: counts and axis ticks ("1", "2.5").
function number(x) { return plain.format(x); }

function bytes(b) {
  if (b === null || b === undefined || !Number.isFinite(b)) return "—";
  let v = Math.abs(b), i = 0;
  while (v >= 1024 && i < BYTE_UNITS.length - 1) { v /= 1024; i++; }
  const text = i === 0 ? String(Math.round(v)) : plain.format(v);
  return `${b < 0 ? "-" : ""}${text}${NBSP}${BYTE_UNITS[i]}`;
}

// [scale, prefix]: none down to a cent, then the prefix that keeps |x| / scale at least 1.
function moneyPrefix(x) {
  const a = Math.abs(x);
  if (a >= 0.01) return MONEY_PREFIXES[0];
  for (const [scale, prefix] of MONEY_PREFIXES) if (a >= scale * 0.9995) return [scale, prefix];
  return MONEY_PREFIXES[MONEY_PREFIXES.length - 1];
}

// 7.177e-07 USD -> "718 nUSD"; 0.0452 USD -> "0.0452 USD"; 12.3 -> "12.3 USD". `per` adds "/h" etc.
function money(x, currency = "USD", per = "") {
  if (x === null || x === undefined || !Number.isFinite(x)) return "—";
  if (x === 0) return `0${NBSP}${currency}${per}`;
  const [scale, prefix] = moneyPrefix(x);
  return `${sigFigs(x / scale)}${NBSP}${prefix}${currency}${per}`;
}

function seconds(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "—";
  const a = Math.abs(s);
  if (a < 1e-3) return `${sigFigs(s * 1e6)}${NBSP}µs`;
  if (a < 1) return `${sigFigs(s * 1e3)}${NBSP}ms`;
  if (a < 120) return `${sigFigs(s)}${NBSP}s`;
  if (a < 7200) return `${sigFigs(s / 60)}${NBSP}min`;
  return `${sigFigs(s / 3600)}${NBSP}h`;
}

// Rounded to a tenth of a percent; a value that rounds to zero has no sign ("0.0 %", not "-0.0 %").
const percent = (x) => `${Math.abs(x) < 0.0005 ? "0.0" : (x * 100).toFixed(1)}${NBSP}%`;
const signedPercent = (x) => (Math.abs(x) < 0.0005 ? `0.0${NBSP}%` : `${x >= 0 ? "+" : "−"}${(Math.abs(x) * 100).toFixed(1)}${NBSP}%`);

// Evenly spaced round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]: about
// `count` of them, and at least three.
function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const steps = [];
  for (let power = 10 ** Math.floor(Math.log10((hi - lo) / count)) * 10; steps.length < 8; power /= 10) steps.push(5 * power, 2 * power, power);
  const ticksOf = (step) => {
    const ticks = [];
    for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
    return ticks;
  };
  for (const step of steps) {
    const ticks = ticksOf(step);
    if (ticks.length >= Math.max(3, Math.floor(count * 0.6))) return ticks;
  }
  return ticksOf(steps[steps.length - 1]);
}

// A time as "2026-11-24 03:50 UTC": the same on every screen, whatever the browser's zone.
function when(iso) {
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return "—";
  return `${t.toISOString().slice(0, 16).replace("T", " ")}${NBSP}UTC`;
}

// A report's field as a person reads it: durations with their unit, numbers to three figures.
function field(name, value) {
  if (typeof value !== "number") return String(value);
  if (/_seconds$/.test(name)) return seconds(value);
  if (/_bytes$/.test(name)) return bytes(value);
  return Number.isInteger(value) ? String(value) : sigFigs(value);
}

window.fmt = { NBSP, number, bytes, money, moneyPrefix, seconds, percent, signedPercent, sigFigs, niceTicks, when, field };
})();
