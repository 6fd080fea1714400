// A JSON value shown pretty, with a button that copies it: the event page of the
// dashboard and the portal's delivery view.
import { el } from "./kit.js";

const pretty = (value) => JSON.stringify(value, null, 2);

async function copy(text, pre, button) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch {
    // No clipboard permission (an iframe without it): select the text for Ctrl+C.
    const range = document.createRange();
    range.selectNodeContents(pre);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    button.textContent = "Selected: press Ctrl+C";
  }
  setTimeout(() => (button.textContent = "Copy"), 2000);
}

/** A <pre> of `value` as indented JSON and a Copy button above it. */
export function payloadBlock(value, label) {
  const text = pretty(value);
  const pre = el("pre", { class: "payload", tabindex: 0, "aria-label": label || "Payload" }, text);
  const button = el("button", { type: "button", class: "btn small ghost copy", onclick: (e) => copy(text, pre, e.currentTarget) }, "Copy");
  return el("div", { class: "payload-block" }, el("div", { class: "payload-tools" }, button), pre);
}
