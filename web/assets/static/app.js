// Progressive enhancement only: every page works without this file (GET
// forms and a multipart upload rendered by the server). With it, a change
// to a calculator control submits the form, so the bar follows the inputs
// and the URL keeps the view; the trace view's speed-up select switches
// the what-if rows the server computed for every choice.
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
  const speedup = document.getElementById("speedup");
  if (speedup) {
    speedup.addEventListener("change", () => {
      for (const t of document.querySelectorAll("table.whatif")) t.dataset.show = speedup.value;
    });
  }
  // Bound meters: widths from data attributes (the page's CSP allows no inline styles).
  for (const f of document.querySelectorAll(".meter .fill[data-frac]")) {
    const x = Math.max(0, Math.min(1, parseFloat(f.dataset.frac) || 0));
    f.style.width = (100 * x).toFixed(1) + "%";
  }
});
