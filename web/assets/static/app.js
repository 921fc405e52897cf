// Progressive enhancement only: the form works without this file (a GET
// form rendered by the server). With it, a change to any control submits
// the form, so the bar follows the inputs and the URL keeps the view.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("calc");
  if (!form) return;
  form.addEventListener("change", (ev) => {
    if (ev.target.name === "model" && !ev.target.value) return;
    // Empty fields stay out of the URL, as the server writes it.
    for (const el of form.elements) {
      if (el.name && el.value === "") el.disabled = true;
    }
    form.submit();
  });
});
