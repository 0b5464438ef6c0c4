// The web console in a real browser: Debian's Chromium, headless, driven by Playwright, against
// a live three-node cluster with auth on (run.sh starts it). Leases are made and ended with the
// tenure CLI, as an operator's services would, and the console must show them as they happen.
//
// Needs: LIVE_HTTP (the gateways' URLs), LIVE_ADMIN_TOKEN, LIVE_CLIENT_TOKEN (principal
// `alice`), TENURE_ENDPOINTS, TENURE_CLI (the tenure binary); CHROMIUM (/usr/bin/chromium) and
// CONSOLE_SHOTS (where the screenshots go) are optional.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync } from "node:fs";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { chromium } from "playwright-core";

const run = promisify(execFile);
const base = (process.env.LIVE_HTTP || "").split(",")[0];
const adminToken = process.env.LIVE_ADMIN_TOKEN;
const clientToken = process.env.LIVE_CLIENT_TOKEN;
const shots = process.env.CONSOLE_SHOTS || "shots";
assert.ok(base && adminToken && clientToken && process.env.TENURE_CLI, "run.sh sets LIVE_HTTP, the tokens and TENURE_CLI");
mkdirSync(shots, { recursive: true });

// The CLI, as principal alice (a client token).
async function cli(...args) {
  const { stdout } = await run(process.env.TENURE_CLI, [...args, "--output", "json"], {
    env: { ...process.env, TENURE_TOKEN: clientToken },
  });
  return JSON.parse(stdout);
}

// An acquire that waits in the room, in the background: its promise settles when it ends.
function waitingAcquire(resource, holder) {
  return run(process.env.TENURE_CLI, ["acquire", resource, "--holder", holder, "--ttl", "60s", "--wait", "30s", "--output", "json"], {
    env: { ...process.env, TENURE_TOKEN: clientToken },
  }).then(
    ({ stdout }) => ({ ok: true, out: stdout }),
    (error) => ({ ok: false, out: `${error.stdout}${error.stderr}` }),
  );
}

function tokenOf(reply) {
  const found = JSON.stringify(reply).match(/"fencing_token":\s*"?(\d+)/);
  assert.ok(found, `a fencing token in ${JSON.stringify(reply)}`);
  return BigInt(found[1]);
}

let browser;
const problems = [];

function watchPage(page, who) {
  page.on("pageerror", (error) => problems.push(`${who}: ${error}`));
  page.on("console", (message) => {
    // A refused API call is logged by the browser as a failed load: those are checked below.
    if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) problems.push(`${who}: ${message.text()}`);
  });
  // Only the API may refuse (the test makes it), and only this origin is asked for anything.
  page.on("response", (response) => {
    const url = new URL(response.url());
    if (url.origin !== new URL(base).origin) problems.push(`${who}: asked ${url}`);
    else if (response.status() >= 400 && !url.pathname.startsWith("/v1/")) problems.push(`${who}: ${response.status()} for ${url.pathname}`);
  });
  page.on("requestfailed", (request) => {
    const url = new URL(request.url());
    // A page's API calls (its watch stream among them) are aborted when the page goes away:
    // the console's own AbortController, not a failure. An asset that fails still counts.
    const aborted = request.failure()?.errorText === "net::ERR_ABORTED";
    if (!(url.pathname.startsWith("/v1/") && aborted)) problems.push(`${who}: ${url} failed: ${request.failure()?.errorText}`);
  });
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
}

async function signIn(page, token) {
  await page.goto(`${base}/`);
  await page.fill("#token", token);
  await page.click("#sign-in");
  await page.waitForSelector("#resource-list table, #resource-list p");
}

async function confirm(page, fields = {}) {
  await page.waitForSelector("#confirm[open]");
  for (const [name, value] of Object.entries(fields)) await page.fill(`#confirm input[name="${name}"]`, value);
  await page.click("#confirm-ok");
  await page.waitForSelector("#confirm:not([open])", { state: "attached" });
}

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
});

test("an admin signs in and follows a resource's leases live", async (t) => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = watchPage(await context.newPage(), "admin");
  const resource = "console/db-primary";

  await t.test("the sign-in refuses a token the cluster does not know", async () => {
    await page.goto(`${base}/`);
    await page.waitForSelector("#token");
    await shot(page, "login");
    await page.fill("#token", "not-a-token-of-this-cluster-0123456789");
    await page.click("#sign-in");
    await page.waitForFunction(() => document.querySelector("#login-error").textContent.includes("unauthenticated"));
  });

  await t.test("an admin token is taken, and kept for the tab", async () => {
    await signIn(page, adminToken);
    assert.equal(await page.textContent("#who"), "admin token");
    await page.reload();
    await page.waitForSelector("#resource-list table, #resource-list p");
    assert.equal(await page.$("#token"), null, "no second sign-in in the same tab");
    // Another tab has its own: it asks.
    const other = watchPage(await context.newPage(), "second tab");
    await other.goto(`${base}/`);
    await other.waitForSelector("#token");
    await other.close();
  });

  await t.test("an admin creates a resource, after a confirmation", async () => {
    await page.click("#create-resource");
    await confirm(page, { name: resource, kind: "database", displayName: "Primary database" });
    await page.waitForFunction((name) => document.querySelector("#resource-name")?.textContent === name, resource);
    assert.match(await page.textContent("#holders"), /Nobody holds it/);
  });

  let first;
  await t.test("a lease acquired with the CLI appears within 1 s, with its time left counting down", async () => {
    const acquired = await cli("acquire", resource, "--holder", "api-1", "--ttl", "60s");
    const answered = performance.now();
    first = tokenOf(acquired);
    await page.waitForSelector(`#holders tr[data-holder="api-1"][data-token="${first}"]`, { timeout: 5000 });
    const seenAfter = performance.now() - answered;
    console.log(`the lease appeared ${seenAfter.toFixed(0)} ms after the CLI's acquire returned`);
    assert.ok(seenAfter <= 1000, `the lease appeared after ${seenAfter.toFixed(0)} ms`);
    const left = parseFloat(await page.textContent("#holders .countdown"));
    assert.ok(left > 50 && left <= 60, `time left ${left}`);
    await page.waitForFunction((start) => parseFloat(document.querySelector("#holders .countdown").textContent) < start - 0.5, left);
    await page.waitForSelector(`#timeline rect[data-holder="api-1"][data-end="live"]`);
  });

  await t.test("a handoff through the waiting room shows in the timeline", async () => {
    const waiter = waitingAcquire(resource, "api-2");
    await page.waitForSelector(`#waiters tr[data-waiter="api-2"]`);
    await cli("release", resource, "--holder", "api-1", "--token", String(first));
    const admitted = await waiter;
    assert.ok(admitted.ok, admitted.out);
    const second = tokenOf(JSON.parse(admitted.out));
    assert.ok(second > first);
    await page.waitForSelector(`#timeline rect[data-holder="api-1"][data-end="released"]`);
    await page.waitForSelector(`#timeline rect[data-holder="api-2"][data-end="live"][data-token="${second}"]`);
    await page.waitForSelector(`#events tr[data-event="admitted"]`);
  });

  await t.test("an admin transfers the lease, after a confirmation", async () => {
    await page.click(`#holders tr[data-holder="api-2"] button[data-action="transfer"]`);
    await confirm(page, { toHolder: "api-3" });
    await page.waitForSelector(`#holders tr[data-holder="api-3"]`);
    await page.waitForSelector(`#timeline rect[data-holder="api-2"][data-end="transferred"]`);
    await page.waitForSelector(`#timeline rect[data-holder="api-3"][data-end="live"]`);
    await page.waitForSelector(`#timeline [data-mark="transferred"]`);
  });

  await t.test("an admin cancels a wait, after a confirmation", async () => {
    const waiter = waitingAcquire(resource, "api-4");
    await page.waitForSelector(`#waiters tr[data-waiter="api-4"]`);
    await page.waitForSelector(`#timeline [data-mark="queued"][data-holder="api-4"]`);
    await shot(page, "resource");
    await page.click(`#waiters tr[data-waiter="api-4"] button[data-action="cancel-wait"]`);
    await confirm(page);
    const ended = await waiter;
    assert.equal(ended.ok, false, "the waiting acquire ends without a lease");
    assert.match(ended.out, /wait_cancelled/);
    await page.waitForFunction(() => !document.querySelector(`#waiters tr[data-waiter="api-4"]`));
  });

  await t.test("a cancelled confirmation does nothing; a confirmed release ends the lease", async () => {
    const token = await page.getAttribute(`#holders tr[data-holder="api-3"]`, "data-token");
    await page.click(`#holders tr[data-holder="api-3"] button[data-action="release"]`);
    await page.waitForSelector("#confirm[open]");
    await page.click("#confirm button[value=cancel]");
    // The cluster says so too, after the time a release would have taken to commit.
    const still = await cli("validate", resource, "--token", token);
    assert.equal(still.valid, true, JSON.stringify(still));
    assert.ok(await page.$(`#holders tr[data-holder="api-3"]`), "still held after Cancel");
    await page.click(`#holders tr[data-holder="api-3"] button[data-action="release"]`);
    await confirm(page);
    await page.waitForSelector(`#timeline rect[data-holder="api-3"][data-end="released"]`);
    await page.waitForFunction(() => document.querySelector("#holders").textContent.includes("Nobody holds it"));
    await shot(page, "timeline");
  });

  await t.test("a lease its holder stops renewing is reclaimed, and the timeline marks it", async () => {
    const crashed = "console/flaky-worker";
    await cli("acquire", crashed, "--holder", "crashy", "--ttl", "1s");
    await page.goto(`${base}/#/resource/${encodeURIComponent(crashed)}`);
    await page.waitForSelector(`#timeline rect[data-holder="crashy"][data-end="reclaimed"]`, { timeout: 15000 });
    await page.waitForSelector(`#timeline [data-mark="reclaimed"]`);
    await page.waitForSelector(`#events tr[data-event="reclaimed"]`);
  });

  await t.test("the cluster page shows the members, the leader and the indexes", async () => {
    await page.goto(`${base}/#/cluster`);
    await page.waitForSelector("#members tbody tr");
    assert.equal((await page.$$("#members tbody tr")).length, 3);
    assert.match(await page.textContent("#leader"), /^node \d/);
    assert.ok(Number(await page.textContent("#applied")) > 0);
    assert.ok(Number(await page.textContent("#fsyncs")) > 0);
    await shot(page, "cluster");
  });

  await t.test("the resources list searches by prefix, and a lease is found by its holder", async () => {
    await cli("acquire", "console/cache-1", "--holder", "worker-9", "--ttl", "60s");
    await cli("acquire", "elsewhere/x", "--holder", "worker-9", "--ttl", "60s");
    await page.goto(`${base}/#/resources?prefix=console/`);
    await page.waitForSelector(`#resource-list tr[data-resource="console/cache-1"]`);
    assert.equal(await page.$(`#resource-list tr[data-resource="elsewhere/x"]`), null);
    await shot(page, "resources");
    await page.goto(`${base}/#/leases?holder=worker-9`);
    await page.waitForSelector(`#lookup tr[data-resource="elsewhere/x"]`);
    assert.equal((await page.$$("#lookup tbody tr")).length, 2);
    await shot(page, "leases");
  });

  await t.test("signing out forgets the token", async () => {
    await page.click("#signout");
    await page.waitForSelector("#token");
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  });
  await context.close();
});

test("a client token sees leases but no admin action, and is refused one", async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = watchPage(await context.newPage(), "client");
  await signIn(page, clientToken);
  assert.equal(await page.textContent("#who"), "client token");
  assert.equal(await page.$("#create-resource"), null);

  await page.goto(`${base}/#/resource/${encodeURIComponent("console/cache-1")}`);
  await page.waitForSelector(`#holders tr[data-holder="worker-9"]`);
  assert.equal(await page.$("#holders button[data-action]"), null, "no release or transfer button");

  await page.goto(`${base}/#/cluster`);
  await page.waitForSelector("#cluster-refused");
  assert.match(await page.textContent("#cluster-refused"), /insufficient_permissions/);
  await shot(page, "non-admin");

  // The API refuses what the page does not offer.
  const status = await page.evaluate(async (token) => {
    const response = await fetch("/v1/resources", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "console/not-mine" }),
    });
    return [response.status, (await response.json()).reason];
  }, clientToken);
  assert.deepEqual(status, [403, "insufficient_permissions"]);
  await context.close();
});

test("the page loads nothing the console did not ship and logs no error", () => {
  assert.deepEqual(problems, []);
});
