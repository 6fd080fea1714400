// Replay jobs: a time range sent again (POST /v1/replays), counted first on request.
import { el, num, badge } from "./kit.js";
import { $, state, api, toast, handleError, endpointLabel } from "./dash-ctx.js";

function replayBody(dryRun) {
  const since = $("r-since").value, until = $("r-until").value;
  if (!since || !until) return null;
  const body = {
    since: new Date(since).toISOString(), until: new Date(until).toISOString(),
    status: $("r-status").value.split(","), dry_run: dryRun,
  };
  if ($("r-endpoint").value) body.endpoint_id = $("r-endpoint").value;
  if ($("r-type").value.trim()) body.type = $("r-type").value.trim();
  return body;
}

export async function replayRange(dryRun) {
  const body = replayBody(dryRun);
  if (!body) return toast("Give both ends of the range", true);
  try {
    const res = await api("POST", "v1/replays", null, body);
    $("replay-note").textContent = dryRun
      ? `${num(res.matched)} deliver${res.matched === 1 ? "y matches" : "ies match"} now`
      : `${res.id} started: the workers replay it, paced per endpoint`;
  } catch (e) {
    handleError(e);
  }
  await loadReplays();
}

async function cancelReplay(id) {
  try {
    await api("POST", `v1/replays/${encodeURIComponent(id)}/cancel`, null, {});
    toast(`Replay ${id} cancelled`);
  } catch (e) {
    handleError(e);
  }
  await loadReplays();
}

export async function loadReplays() {
  if (state.view !== "endpoints") return;
  const res = await api("GET", "v1/replays");
  const sel = $("r-endpoint");
  if (sel.options.length !== $("f-endpoint").options.length) {
    sel.replaceChildren(...[...$("f-endpoint").options].map((o) => el("option", { value: o.value }, o.textContent)));
  }
  const rows = res.data.map((j) => el("tr", { dataset: { id: j.id } },
    el("td", { class: "mono" }, j.id),
    el("td", { title: j.error || "" }, badge(j.state, j.state)),
    el("td", { class: "small" }, `${j.since} … ${j.until}`, j.type ? ` · ${j.type}` : "", j.endpoint_id ? ` · ${endpointLabel(j.endpoint_id)}` : ""),
    el("td", { class: "num" }, num(j.matched)), el("td", { class: "num" }, num(j.replayed)),
    el("td", { class: "num" }, num(j.skipped)), el("td", { class: "num" }, num(j.waiting)),
    el("td", {}, j.state === "running"
      ? el("button", { type: "button", class: "btn small ghost", onclick: () => cancelReplay(j.id) }, "Cancel")
      : null)));
  $("replays").tBodies[0].replaceChildren(...rows);
}
