// The official Svix JavaScript SDK (the svix npm package tools/package.json pins),
// unpatched, against relay: run by tests/system/test_svix_sdk.py with RELAY_URL,
// RELAY_TOKEN (the operator's), KEY_TOKEN (an API key of the app "shop") and SVIX_MODULE
// (the SDK's entry file). A loopback receiver here takes the deliveries and checks each
// with the SDK's Webhook verifier. Prints "ok" and exits 0 when every check held.
import assert from "node:assert/strict";
import http from "node:http";
import { pathToFileURL } from "node:url";

const { Svix, Webhook } = await import(pathToFileURL(process.env.SVIX_MODULE).href);
const url = process.env.RELAY_URL;
const svix = new Svix(process.env.RELAY_TOKEN, { serverUrl: url, retryScheduleInMs: [] });

const received = [];
let failing = true;
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    received.push({ path: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() });
    res.statusCode = req.url === "/flaky" && failing ? 500 : 200;
    res.end("ok");
  });
});
await new Promise((done) => server.listen(0, "127.0.0.1", done));
const hook = `http://127.0.0.1:${server.address().port}`;

async function until(check, what) {
  for (let i = 0; i < 200; i++) {
    const found = await check();
    if (found) return found;
    await new Promise((done) => setTimeout(done, 50));
  }
  throw new Error(`gave up waiting for ${what}`);
}

// the delivery's body, once the SDK's verifier accepted its signature
function verified(secret, request) {
  new Webhook(secret).verify(request.body, request.headers);
  return JSON.parse(request.body);
}

function delivered(path, id) {
  return until(() => received.find((r) => r.path === path && r.headers["webhook-id"] === id), id);
}

async function refused(call, status, code) {
  await assert.rejects(call, (err) => {
    assert.equal(err.code, status);
    assert.equal(err.body.code, code);
    return true;
  });
}

// applications
const app = await svix.application.create({ name: "Shop", uid: "shop" });
assert.equal(app.id, "shop");
assert.ok(app.createdAt instanceof Date);
assert.equal((await svix.application.getOrCreate({ name: "X", uid: "shop" })).name, "Shop");
assert.deepEqual((await svix.application.list()).data.map((a) => a.id), ["shop"]);

// endpoints, messages (eventId: one message), the verifier
const ep = await svix.endpoint.create("shop", { url: `${hook}/hook`, eventTypes: ["order.paid"] });
const secret = (await svix.endpoint.getSecret("shop", ep.id)).key;
const msg = await svix.message.create("shop", {
  eventType: "order.paid",
  eventId: "js-1",
  payload: { order: 1 },
});
const again = await svix.message.create("shop", {
  eventType: "order.paid",
  eventId: "js-1",
  payload: { order: 1 },
});
assert.equal(again.id, msg.id);
const first = await delivered("/hook", msg.id);
assert.deepEqual(verified(secret, first).data, { order: 1 });
assert.throws(() => new Webhook(`whsec_${"A".repeat(32)}`).verify(first.body, first.headers));
const got = await svix.message.get("shop", msg.id, { withContent: true });
assert.deepEqual(got.payload, { order: 1 });
assert.ok(got.timestamp instanceof Date);

// attempts, resend
const attempts = await until(async () => {
  const page = await svix.messageAttempt.listByMsg("shop", msg.id);
  return page.data.length ? page : null;
}, "an attempt");
assert.equal(attempts.data[0].responseStatusCode, 200);
assert.equal(attempts.data[0].status, 0);
const byEndpoint = await svix.messageAttempt.listByEndpoint("shop", ep.id);
assert.deepEqual(byEndpoint.data.map((a) => a.msgId), [msg.id]);
await svix.messageAttempt.resend("shop", msg.id, ep.id);
await until(() => received.filter((r) => r.path === "/hook").length === 2, "the resend");

// rotate: the new secret verifies what follows
await svix.endpoint.rotateSecret("shop", ep.id, {});
const fresh = (await svix.endpoint.getSecret("shop", ep.id)).key;
assert.notEqual(fresh, secret);
const next = await svix.message.create("shop", { eventType: "order.paid", payload: { order: 2 } });
const later = await delivered("/hook", next.id);
assert.deepEqual(verified(fresh, later).data, { order: 2 });

// recover: what died at a failing endpoint goes again
const since = new Date(Date.now() - 5000);
const bad = await svix.endpoint.create("shop", { url: `${hook}/flaky`, eventTypes: ["refund.made"] });
const dead = await svix.message.create("shop", { eventType: "refund.made", payload: { r: 1 } });
await until(async () => {
  const page = await svix.messageAttempt.listByMsg("shop", dead.id, { status: 2 });
  return page.data.length === 2;
}, "a dead delivery");
failing = false;
const task = await svix.endpoint.recover("shop", bad.id, { since });
assert.equal(task.status, "finished");
await until(() => received.filter((r) => r.path === "/flaky").length === 3, "the recovery");
const badSecret = (await svix.endpoint.getSecret("shop", bad.id)).key;
const recovered = received.filter((r) => r.path === "/flaky").at(-1);
assert.equal(verified(badSecret, recovered).id, dead.id);

// what relay does not have: a clear 422
await refused(
  svix.message.create("shop", { eventType: "order.paid", payload: {}, channels: ["eu"] }),
  422,
  "unsupported",
);

// portal access: relay's portal, its token good for the app
const access = await svix.authentication.appPortalAccess("shop", {});
assert.ok(access.url.startsWith(`${url}/portal/#token=rp_`));
const portal = new Svix(access.token, { serverUrl: url, retryScheduleInMs: [] });
assert.equal((await portal.endpoint.list("shop")).data.length, 2);

// an app's key: its own app only
await svix.application.create({ name: "Rival", uid: "rival" });
const rival = await svix.endpoint.create("rival", { url: `${hook}/rival` });
const key = new Svix(process.env.KEY_TOKEN, { serverUrl: url, retryScheduleInMs: [] });
assert.deepEqual((await key.application.list()).data.map((a) => a.id), ["shop"]);
await refused(key.application.get("rival"), 404, "not_found");
await refused(key.endpoint.get("rival", rival.id), 404, "not_found");
await refused(key.endpoint.getSecret("shop", rival.id), 404, "not_found");
await refused(key.message.create("rival", { eventType: "t.x", payload: {} }), 404, "not_found");
assert.equal(received.filter((r) => r.path === "/rival").length, 0);

server.close();
console.log("ok");
