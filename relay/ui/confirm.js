// A confirmation in a modal <dialog>: what is about to happen, in words, and two
// buttons. Escape or Cancel says no; the focus starts on Cancel.
import { el } from "./kit.js";

/** Resolves true when the user confirms. `extra` (a node) goes under the text. */
export function confirmDialog(title, text, okLabel, extra) {
  const cancel = el("button", { type: "button", class: "btn ghost" }, "Cancel");
  const ok = el("button", { type: "submit", class: "btn danger" }, okLabel);
  const form = el("form", { class: "epf", method: "dialog", "aria-label": title },
    el("h2", {}, title), el("p", {}, text), extra || null,
    el("div", { class: "epf-actions" }, cancel, ok));
  const dialog = el("dialog", { class: "epf-dialog confirm" }, form);
  document.body.append(dialog);
  return new Promise((resolve) => {
    const done = (yes) => {
      dialog.close();
      dialog.remove();
      resolve(yes);
    };
    cancel.addEventListener("click", () => done(false));
    dialog.addEventListener("cancel", (e) => {
      e.preventDefault();
      done(false);
    });
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      done(true);
    });
    dialog.showModal();
    cancel.focus();
  });
}
