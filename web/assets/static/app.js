// Progressive enhancement only: every page works without this file (GET
// forms and a multipart upload rendered by the server). With it, a change
// to a calculator control submits the form, so the bar follows the inputs
// and the URL keeps the view; the model field suggests the catalog's and
// the Hub's ids; the trace view's sliders switch between the what-if
// figures the server computed for every speed-up.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("calc");
  if (form) {
    form.addEventListener("change", (ev) => {
      if (ev.target.name === "model" && !ev.target.value) return;
      // Empty fields stay out of the URL, as the server writes it.
      for (const el of form.elements) {
        if (el.name && el.value === "") el.disabled = true;
      }
      form.submit();
    });
  }
  // Model search: the catalog, and the Hub (or its cache) when the server
  // reads it, into the model field's suggestions.
  const model = form && form.elements.namedItem("model");
  const list = document.getElementById("models");
  const note = document.getElementById("hubnote");
  if (model && list) {
    const catalog = Array.from(list.options, (o) => o.value);
    let timer = 0, seq = 0;
    model.addEventListener("input", () => {
      clearTimeout(timer);
      const q = model.value.trim();
      timer = setTimeout(async () => {
        const mine = ++seq;
        if (q.length < 2) {
          fill(catalog.map((id) => [id, ""]));
          return;
        }
        try {
          const res = await fetch("/api/search?q=" + encodeURIComponent(q));
          if (!res.ok || mine !== seq) return;
          const r = await res.json();
          const from = r.hub_from === "cache" ? "Hugging Face cache" : "Hub";
          fill(r.catalog.map((id) => [id, "catalog"]).concat(r.hub.map((id) => [id, from])));
          if (note) note.textContent = r.hub_error ? "The Hub did not answer (" + r.hub_error + "): showing the catalog and the cache." : "";
        } catch (e) {
          if (note) note.textContent = "Search failed: " + e.message;
        }
      }, 250);
    });
    const fill = (rows) => {
      list.replaceChildren(...rows.map(([id, from]) => {
        const o = document.createElement("option");
        o.value = id;
        if (from) o.label = from;
        return o;
      }));
    };
  }
  const configFile = document.getElementById("configfile");
  if (configFile) configFile.addEventListener("change", () => { if (configFile.files.length) configFile.form.submit(); });
  // The what-if sliders: one per category, each column's text at every
  // speed-up in data-v ("|"-separated, in the select's order); the select
  // sets every slider.
  const speedup = document.getElementById("speedup");
  const choices = speedup ? speedup.dataset.speedups.split("|") : [];
  const setRow = (tr, i) => {
    const input = tr.querySelector("input.speedup");
    input.value = i;
    tr.querySelector("output").textContent = choices[i] + "×";
    for (const td of tr.querySelectorAll("[data-v]")) td.textContent = td.dataset.v.split("|")[i];
    const fill = tr.querySelector(".fill[data-fracs]");
    if (fill) {
      fill.dataset.frac = fill.dataset.fracs.split("|")[i];
      meter(fill);
    }
  };
  for (const input of document.querySelectorAll("table.whatif input.speedup")) {
    input.addEventListener("input", () => setRow(input.closest("tr"), parseInt(input.value, 10)));
  }
  if (speedup) {
    speedup.addEventListener("change", () => {
      const i = choices.indexOf(speedup.value);
      if (i < 0) return;
      for (const tr of document.querySelectorAll("table.whatif tr[data-category]")) setRow(tr, i);
    });
  }
  // Bound meters: widths from data attributes (the page's CSP allows no inline styles).
  function meter(f) {
    const x = Math.max(0, Math.min(1, parseFloat(f.dataset.frac) || 0));
    f.style.width = (100 * x).toFixed(1) + "%";
  }
  for (const f of document.querySelectorAll(".meter .fill[data-frac]")) meter(f);
});
