// llmco2 calculator page: fills the pickers from /api/catalog, posts the form to /api/compare and
// draws the ranked table, the chart (inline SVG) and the notes. No libraries, no network beyond
// the local server.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

/** A number with `digits` significant digits, as Python's `:.3g` prints it (no trailing zeros). */
function fmt(value, digits = 3) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  return String(Number.parseFloat(value.toPrecision(digits)));
}

function option(select, value, text) {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = text ?? value;
  select.append(o);
}

async function loadCatalog() {
  const response = await fetch("/api/catalog");
  const c = await response.json();
  for (const m of c.models) option($("models"), m.id, m.params_b ? `${m.name} (${m.params_b} B)` : m.name);
  for (const n of c.gpu_counts) option($("max_gpus"), n);
  $("max_gpus").value = c.defaults.max_gpus;
  for (const b of c.backgrounds) option($("background"), b, {conv: "Azure conversation trace", code: "Azure code trace",
    fixed: "fixed lengths"}[b] ?? b);
  for (const r of c.regions) option($("region"), r.id, `${r.name} (${fmt(r.g_co2eq_per_kwh)} g/kWh)`);
  $("region").value = c.defaults.region;
  for (const p of c.pue) option($("pues"), p.id, `${p.name}: ${p.value}`);
  for (const e of c.engines) option($("engine"), e);
  $("engine").value = c.defaults.engine;
  for (const d of c.dtypes) option($("dtype"), d);
  $("dtype").value = c.defaults.dtype;
  $("serving_requests").value = c.defaults.serving_requests;
  const chips = $("gpu-chips");
  for (const g of c.gpus) {
    const label = document.createElement("label");
    label.title = `${g.name}, ${g.memory_gb} GB`;
    label.innerHTML = `<input type="checkbox" value="${g.id}"> ${g.id}`;
    chips.append(label);
  }
  chips.addEventListener("change", () => {
    const typed = $("gpus").value.split(",").map((g) => g.trim()).filter((g) => g && !chips.querySelector(`input[value="${g}"]`));
    $("gpus").value = [...typed, ...[...chips.querySelectorAll("input:checked")].map((i) => i.value)].join(",");
  });
  $("gpus").addEventListener("input", () => {
    const typed = new Set($("gpus").value.split(",").map((g) => g.trim()));
    for (const box of chips.querySelectorAll("input")) box.checked = typed.has(box.value);
  });
}

function gpusMode() { return document.querySelector("input[name=gpus-mode]:checked").value; }
function loadKind() { return document.querySelector("input[name=load-kind]:checked").value; }

function syncForm() {
  const list = gpusMode() === "list";
  $("gpus").disabled = !list;
  $("gpu-chips").hidden = !list;
  $("fixed-lengths").hidden = $("background").value !== "fixed";
  const upload = $("config").files.length > 0;
  $("model").disabled = upload;
  $("clear-config").hidden = !upload;
}

/** The form as the API's fields (empty ones are left out: their defaults apply). */
function formData() {
  const data = new FormData();
  const put = (name, value) => { if (String(value ?? "").trim() !== "") data.append(name, String(value).trim()); };
  if ($("config").files.length) data.append("config", $("config").files[0]);
  else put("model", $("model").value);
  put("gpus", gpusMode() === "list" ? $("gpus").value : gpusMode());
  put(loadKind(), $("load").value);
  put("background", $("background").value);
  if ($("background").value === "fixed") { put("prompt_tokens", $("prompt_tokens").value); put("generated_tokens", $("generated_tokens").value); }
  for (const id of ["max_gpus", "expert_parallel", "slo_ttft_s", "slo_tpot_s", "slo_percentile", "region", "carbon_intensity", "pue",
    "lifetime_years", "scope", "engine", "dtype", "serving_requests", "seed"]) put(id, $(id).value);
  return data;
}

const INPUT_OF = {rate: "load", concurrency: "load", gpus: "gpus", config: "config"};

function showError(body) {
  $("error").textContent = body.error;
  $("error").hidden = false;
  const input = $(INPUT_OF[body.parameter] ?? body.parameter ?? "");
  if (input) input.setAttribute("aria-invalid", "true");
}

async function submit(event) {
  event.preventDefault();
  for (const el of document.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  $("error").hidden = true;
  $("intro").hidden = true;
  $("spinner").hidden = false;
  $("submit").disabled = true;
  document.body.dataset.state = "busy";
  const slo = {tpot: Number.parseFloat($("slo_tpot_s").value), percentile: Number.parseFloat($("slo_percentile").value) || 90};
  try {
    const response = await fetch("/api/compare", {method: "POST", body: formData()});
    const body = await response.json().catch(() => ({error: `the server answered ${response.status}`}));
    if (!response.ok) {
      showError(body);
      $("output").hidden = true;
      document.body.dataset.state = "error";
      return;
    }
    render(body, slo);
    document.body.dataset.state = "done";
  } catch (err) {
    showError({error: `no answer from the server: ${err}`});
    document.body.dataset.state = "error";
  } finally {
    $("spinner").hidden = true;
    $("submit").disabled = false;
  }
}

function status(row) {
  return row.meets_slo ? "meets" : (row.stable ? "misses" : "behind");
}

function render(result, slo) {
  const load = loadKind() === "rate" ? `${$("load").value} requests/s` : `${$("load").value} concurrent requests`;
  const p = `p${fmt(slo.percentile, 6)}`;
  $("title").textContent = `${result.model} at ${load}: ${result.options.length} configurations`;
  $("verdict").textContent = `Verdict: ${result.verdict}`;
  const head = ["#", "configuration", `mg CO2/token (${result.options[0]?.scope ?? "gpu"})`, "10-90%", "GPU J/token", "J 10-90%",
    "server J/token", "wall kW", `TTFT ${p}`, `TPOT ${p}`, "ok"];
  $("table").tHead.innerHTML = `<tr>${head.map((h) => `<th>${h}</th>`).join("")}</tr>`;
  const body = $("table").tBodies[0];
  body.replaceChildren();
  const {ttft, tpot} = result.columns;
  for (const r of result.options) {
    const tr = document.createElement("tr");
    tr.dataset.label = r.label;
    tr.className = status(r);
    const cell = (text, column, value) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (column) { td.dataset.col = column; td.dataset.value = String(value); }
      tr.append(td);
    };
    cell(String(r.rank), "rank", r.rank);
    cell(r.label);
    cell(fmt(1e3 * r.g_per_output_token), "g_per_output_token", r.g_per_output_token);
    cell(`${fmt(1e3 * r.g_per_output_token_low, 2)}–${fmt(1e3 * r.g_per_output_token_high, 2)}`);
    cell(fmt(r.j_per_output_token), "j_per_output_token", r.j_per_output_token);
    cell(`${fmt(r.j_per_output_token_low, 2)}–${fmt(r.j_per_output_token_high, 2)}`);
    cell(fmt(r.server_j_per_output_token), "server_j_per_output_token", r.server_j_per_output_token);
    cell(fmt((r.server_power_w ?? r.power_w) / 1e3), "server_power_w", r.server_power_w ?? r.power_w);
    cell(`${fmt(r[ttft])} s`, ttft, r[ttft]);
    cell(`${fmt(1e3 * r[tpot])} ms`, tpot, r[tpot]);
    cell(status(r) + (r.extrapolated ? " *" : "") + (r.tied_with_best ? " ≈" : ""), "ok", status(r));
    body.append(tr);
  }
  $("chart").replaceChildren(chart(result.options, tpot, slo.tpot));
  notes(result);
  $("output").hidden = false;
}

function notes(result) {
  const list = $("notes");
  list.replaceChildren();
  const add = (text) => { const li = document.createElement("li"); li.textContent = text; list.append(li); };
  add("ok: meets = meets the targets and keeps up; misses = keeps up but misses a target; behind = the queue grows at "
    + "this load; * = a GPU or model family the physics fit has not seen (an extrapolation, wider interval); "
    + "≈ = its interval overlaps the best option's.");
  const extrapolated = result.options.filter((r) => r.extrapolated).length;
  if (extrapolated) add(`extrapolations: ${extrapolated} of ${result.options.length} configurations.`);
  for (const line of result.left_out) add(`left out: ${line}`);
  const a = result.assumptions;
  if (a.grid) add(`grid ${fmt(a.grid.g_co2eq_per_kwh, 4)} g CO2eq/kWh (${a.grid.region ?? "user value"}, ${a.grid.year ?? ""}), `
    + `PUE ${a.pue?.value} (${a.pue?.id ?? "user value"}), GPU lifetime ${a.lifetime_years} years.`);
  if (a.engine) add(`engine: ${a.engine.name}; workload: ${a.workload}.`);
  if (a.scope) add(`carbon on: ${a.scope.carbon_on}.`);
  add(`answered in ${fmt(result.seconds)} s.`);
}

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function ticks(lo, hi, log) {
  if (log) {
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++)
      for (const m of [1, 2, 5]) { const v = m * 10 ** e; if (v >= lo && v <= hi) out.push(v); }
    return out;
  }
  const step0 = (hi - lo) / 5, mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-12; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/** Carbon per token (mg) against TPOT (ms): interval bars, the TPOT target and the Pareto front. */
function chart(rows, tpotColumn, sloTpot) {
  const W = 720, H = 390, m = {l: 64, r: 16, t: 30, b: 46};
  const pts = rows.filter((r) => Number.isFinite(r[tpotColumn])).map((r) => ({
    x: 1e3 * r[tpotColumn], y: 1e3 * r.g_per_output_token, lo: 1e3 * (r.g_per_output_token_low ?? r.g_per_output_token),
    hi: 1e3 * (r.g_per_output_token_high ?? r.g_per_output_token), r}));
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "carbon per token against TPOT", id: "chart-svg"});
  if (!pts.length) return svg;
  const xs = pts.map((p) => p.x).concat(Number.isFinite(sloTpot) ? [1e3 * sloTpot] : []);
  let x0 = Math.min(...xs), x1 = Math.max(...xs);
  const log = x1 / x0 > 8;
  if (log) { x0 /= 1.25; x1 *= 1.25; } else { const pad = (x1 - x0 || x1) * 0.08; x0 = Math.max(0, x0 - pad); x1 += pad; }
  const y1 = Math.max(...pts.map((p) => p.hi)) * 1.08;
  const sx = (v) => m.l + (W - m.l - m.r) * (log ? Math.log(v / x0) / Math.log(x1 / x0) : (v - x0) / (x1 - x0));
  const sy = (v) => H - m.b - (H - m.t - m.b) * (v / y1);
  for (const t of ticks(x0, x1, log)) {
    svg.append(el("line", {x1: sx(t), x2: sx(t), y1: m.t, y2: H - m.b, class: "grid"}));
    svg.append(el("text", {x: sx(t), y: H - m.b + 16, class: "tick", "text-anchor": "middle"}, fmt(t)));
  }
  for (const t of ticks(0, y1, false)) {
    svg.append(el("line", {x1: m.l, x2: W - m.r, y1: sy(t), y2: sy(t), class: "grid"}));
    svg.append(el("text", {x: m.l - 6, y: sy(t) + 4, class: "tick", "text-anchor": "end"}, fmt(t)));
  }
  svg.append(el("text", {x: (m.l + W - m.r) / 2, y: H - 8, class: "axis", "text-anchor": "middle"},
    `TPOT at the percentile (ms${log ? ", log scale" : ""})`));
  svg.append(el("text", {x: 14, y: (m.t + H - m.b) / 2, class: "axis", "text-anchor": "middle",
    transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})`}, "mg CO2eq per output token"));
  if (Number.isFinite(sloTpot)) {
    svg.append(el("line", {x1: sx(1e3 * sloTpot), x2: sx(1e3 * sloTpot), y1: m.t, y2: H - m.b, class: "slo"}));
    svg.append(el("text", {x: sx(1e3 * sloTpot) + 4, y: m.t + 12, class: "tick slo-label"}, "TPOT target"));
  }
  const front = [...pts].sort((a, b) => a.x - b.x || a.y - b.y).filter((p, i, all) => all.slice(0, i).every((q) => q.y > p.y));
  svg.append(el("polyline", {points: front.map((p) => `${sx(p.x)},${sy(p.y)}`).join(" "), class: "front"}));
  for (const p of pts) {
    const g = el("g", {class: `point ${status(p.r)}${p.r.extrapolated ? " extrapolated" : ""}`});
    g.append(el("line", {x1: sx(p.x), x2: sx(p.x), y1: sy(p.lo), y2: sy(p.hi), class: "bar"}));
    const dot = el("circle", {cx: sx(p.x), cy: sy(p.y), r: 5});
    dot.append(el("title", {}, `#${p.r.rank} ${p.r.label}: ${fmt(p.y)} mg/token (${fmt(p.lo, 2)}–${fmt(p.hi, 2)}), `
      + `TPOT ${fmt(p.x)} ms, ${status(p.r)}`));
    g.append(dot);
    if (p.r.rank <= 3) g.append(el("text", {x: sx(p.x) + 7, y: sy(p.y) - 6, class: "tick"}, `#${p.r.rank} ${p.r.label}`));
    svg.append(g);
  }
  const legend = [["meets", "meets the targets"], ["misses", "misses a target"], ["behind", "falls behind"]];
  legend.forEach(([cls, text], i) => {
    const g = el("g", {class: `point ${cls}`});
    g.append(el("circle", {cx: m.l + 8 + 150 * i, cy: 12, r: 5}));
    g.append(el("text", {x: m.l + 18 + 150 * i, y: 16, class: "tick"}, text));
    svg.append(g);
  });
  return svg;
}

document.addEventListener("DOMContentLoaded", async () => {
  for (const input of document.querySelectorAll("input[name=gpus-mode], #background, #config")) input.addEventListener("change", syncForm);
  $("clear-config").addEventListener("click", () => { $("config").value = ""; syncForm(); });
  $("form").addEventListener("submit", submit);
  try {
    await loadCatalog();
    document.body.dataset.ready = "1";
  } catch (err) {
    showError({error: `could not load the catalog: ${err}`});
  }
  syncForm();
});
