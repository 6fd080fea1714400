// The drawer: one delivery with its attempt log, what the receiver answered, the
// payload and the headers sent.
import { el, changed, coarse, ago, iso, badge } from "./kit.js";
import { $, state, api, ApiError, handleError, viewLink } from "./dash-ctx.js";
import { attemptRows, lastResult, sentHeaderRows } from "./attempts.js";
import { waitText } from "./dash-deliveries.js";

export async function openDrawer(id) {
  state.drawerId = id;
  $("scrim").hidden = false;
  $("drawer").hidden = false;
  $("d-id").textContent = id;
  $("d-error").textContent = "";
  $("drawer").querySelector(".drawer-body").scrollTop = 0;
  for (const tr of $("deliveries").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.id === id);
  await loadDrawer().catch(handleError);
  $("drawer").focus();
}

export function closeDrawer() {
  state.drawerId = null;
  $("drawer").hidden = true;
  $("scrim").hidden = true;
  for (const tr of $("deliveries").tBodies[0].rows) tr.classList.remove("selected");
}

export async function loadDrawer() {
  const id = state.drawerId;
  if (!id) return;
  let view;
  try {
    view = await api("GET", `v1/ui/deliveries/${encodeURIComponent(id)}`);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) {
      $("d-error").textContent = `Delivery ${id} does not exist (or has expired).`;
      return;
    }
    throw e;
  }
  if (state.drawerId === id) renderDrawer(view);
}

function renderDrawer(view) {
  if (!changed("drawer", view, coarse(5e3))) return;
  const d = view.delivery;
  const ev = view.event;
  const ep = view.endpoint;
  $("d-id").textContent = d.id;
  $("d-status").replaceChildren(badge(d.status));
  const replayBtn = $("d-replay");
  replayBtn.disabled = !(d.status === "dead" || d.status === "succeeded");
  replayBtn.textContent = d.status === "succeeded" ? "Send again" : "Replay";
  replayBtn.title = replayBtn.disabled ? "Only dead or succeeded deliveries can be replayed" : "Back to pending with a fresh attempt budget";
  const discardBtn = $("d-discard");
  discardBtn.hidden = !(d.status === "dead" && d.blocking);
  discardBtn.disabled = discardBtn.hidden;

  const stamp = (ms) => (ms ? `${iso(ms)} · ${ago(ms)}` : "—");
  const rows = [
    ["Event", viewLink("event", d.event_id, d.event_id, { class: "mono", title: "The event page: payload, every delivery" }), true],
    ["Endpoint", ep ? el("span", {}, ep.url, el("span", { class: "sub-line mono" }, `  ${ep.id}`)) : el("span", { class: "mono" }, `${d.endpoint_id} (deleted)`), true],
    ["Event type", d.type],
    ["App", d.app],
    ["Attempts", `${d.attempts} of ${d.max_attempts}${d.replays ? ` · replayed ${d.replays}×` : ""}`],
    ["Last result", lastResult(d)],
    ["Created", stamp(d.created_at), true],
  ];
  if (d.status === "held") rows.push(["Held", "endpoint disabled: resumes when it is enabled again", true]);
  else if (d.status === "pending") rows.push(["Next attempt", stamp(d.next_attempt_at), true]);
  if (d.deliver_at) rows.push([d.status === "scheduled" ? "Scheduled for" : "Published for", stamp(d.deliver_at), true]);
  if (d.waiting && d.status === "pending") rows.push(["Waiting", `${waitText(d.waiting, d)}${d.waiting.until ? ` (${iso(d.waiting.until)})` : ""}`, true]);
  if (d.lane) rows.push(["Ordered lane", el("span", { class: "mono" }, d.lane), true]);
  if (d.status === "queued") rows.push(["Waiting", `queued behind ${d.lane_head || "the head"} in its lane${d.lane_blocked ? ": the lane is blocked by a dead head" : ""}`, true]);
  if (d.blocking) rows.push(["Blocks its lane", "Replay sends it again, still first; Discard lets the next one go", true]);
  if (d.finished_at) rows.push([d.status === "dead" ? "Died" : "Finished", stamp(d.finished_at), true]);
  if (d.status === "delivering" && d.worker) rows.push(["Worker", el("span", { class: "mono" }, d.worker), true]);
  $("d-summary").replaceChildren(...rows.flatMap(([k, v, wide]) => [el("dt", {}, k), el("dd", { class: wide ? "wide" : "" }, v)]));

  const log = d.attempt_log || [];
  $("d-log-count").textContent = log.length ? `${log.length} request${log.length > 1 ? "s" : ""}` : "";
  $("d-log-empty").hidden = log.length > 0;
  $("d-log").tBodies[0].replaceChildren(...attemptRows(log, true));
  $("d-headers").tBodies[0].replaceChildren(...sentHeaderRows(view.headers));

  const pre = $("d-payload");
  if (ev) {
    pre.textContent = JSON.stringify(ev.payload, null, 2);
    $("d-payload-note").textContent = `data of event ${ev.id}, as JSON`;
  } else {
    pre.textContent = "";
    $("d-payload-note").textContent = "event not found (expired by retention?)";
  }
}
