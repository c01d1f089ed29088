// Drives payonce's on-call console in a real headless Chromium: sign in with an on-call key, the
// overview, filter and search, open an operation and read its timeline, resolve it (first without a
// reason, refused), another tenant's operation not found, sign out. The Rust integration test
// (tests/integration/api/browser.rs) starts the API, makes the operations, runs this file with
// `node --test`, and then checks the ledger.
//
// The third test keeps the overview and a list open while the Rust side changes the ledger, and
// checks that they update in place (no navigation), pause while hidden, keep what on-call is
// working on, show an outage banner as it starts, and say so when the session ends.
//
// Env: PAYONCE_CONSOLE_BASE (the api's base URL), PAYONCE_ON_CALL_KEY, PAYONCE_ATTENTION_ID (an
// operation in needs_attention), PAYONCE_ATTENTION_INVOICE, PAYONCE_OTHER_ID (another tenant's
// operation), PAYONCE_PAYMENT_ID (a succeeded payment) and PAYONCE_REFUND_ID (its refund awaiting
// approval), PAYONCE_REFRESH_MS (the console's refresh interval), PAYONCE_HANDSHAKE_DIR (where
// this test writes `STEP-open` and the Rust side answers `STEP-made`), PAYONCE_SCREENSHOT_DIR.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { access, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { blockingViolations, overflowPx, PHONE_WIDTH_PX } from './axe.mjs';

const env = (name) => {
  const value = process.env[name];
  assert.ok(value, `${name} must be set`);
  return value;
};

const NAVIGATION_TIMEOUT_MS = 15_000;
let browser;

before(async () => {
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    timeout: 30_000,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
});

async function noBlockingViolations(page, what) {
  assert.deepEqual(await blockingViolations(page), [], `axe on ${what}`);
}

async function click(page, selector) {
  const [response] = await Promise.all([page.waitForNavigation(), page.click(selector)]);
  return response;
}

/** How long the Rust side may take to make a change the test asked for. */
const HANDSHAKE_TIMEOUT_MS = 30_000;
/** How often the test looks for the Rust side's answer. */
const HANDSHAKE_POLL_MS = 50;

/** Asks the Rust side for change `step` and waits for its answer (the new operation's id, if any). */
async function change(step) {
  const dir = env('PAYONCE_HANDSHAKE_DIR');
  await writeFile(path.join(dir, `${step}-open`), '');
  const made = path.join(dir, `${step}-made`);
  const deadline = Date.now() + HANDSHAKE_TIMEOUT_MS;
  for (;;) {
    try {
      await access(made);
      return (await readFile(made, 'utf8')).trim();
    } catch {
      assert.ok(Date.now() < deadline, `the Rust side made ${step} in time`);
      await new Promise((resolve) => setTimeout(resolve, HANDSHAKE_POLL_MS));
    }
  }
}

/** Runs the page's timers one refresh interval on and waits for the refresh's fetch to answer. */
async function nextRefresh(page) {
  const url = page.url();
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.url() === url && r.request().resourceType() === 'fetch'),
    page.clock.runFor(Number(env('PAYONCE_REFRESH_MS'))),
  ]);
  return response;
}

test('on-call signs in, finds the operation, reads its chain and resolves it', async () => {
  const base = env('PAYONCE_CONSOLE_BASE');
  const id = env('PAYONCE_ATTENTION_ID');
  const shots = env('PAYONCE_SCREENSHOT_DIR');
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(NAVIGATION_TIMEOUT_MS);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // Refusal pages (401 sign-in, 400 missing reason, 404 other tenant) are logged as failed loads:
    // that is the console working. Anything else (a CSP violation, a missing stylesheet) is a problem.
    const expected = /^Failed to load resource: the server responded with a status of 40(0|1|4)/;
    if (m.type() === 'error' && !expected.test(m.text())) problems.push(`console error: ${m.text()}`);
  });

  // Signed out: the sign-in form.
  const first = await page.goto(`${base}/console`);
  assert.equal(first.status(), 401);
  assert.match(first.headers()['content-security-policy'], /default-src 'none'/);
  await noBlockingViolations(page, 'sign-in');
  await page.fill('#key', env('PAYONCE_ON_CALL_KEY'));
  const signedIn = await click(page, '#sign-in');
  assert.equal(signedIn.status(), 200);
  assert.equal(new URL(page.url()).pathname, '/console');
  assert.equal((await page.locator('h1').textContent()).trim(), 'Overview');
  assert.equal(await page.locator('#chart').count(), 1);
  // Two need attention: the one resolved here and the one the read-only key looks at below.
  assert.equal((await page.locator('#by-state tr:has(a[href$="needs_attention"]) td').nth(1).textContent()).trim(), '2');
  // The overview leads with what needs a person, and reloads itself.
  assert.equal((await page.locator('#count-needs-attention b').textContent()).trim(), '2');
  assert.match(await page.locator('#count-needs-attention').getAttribute('class'), /alert/);
  // It updates itself through the console's own script, not by reloading (no Refresh header).
  const overviewResponse = await page.goto(`${base}/console`);
  assert.equal(overviewResponse.headers()['refresh'], undefined);
  assert.match(overviewResponse.headers()['content-security-policy'], /script-src 'self'/);
  assert.equal(await page.locator('script[src^="/console/assets/refresh-"]').count(), 1);
  assert.equal(await page.locator('#refresh-link').getAttribute('href'), '/console');
  await noBlockingViolations(page, 'overview');
  // The stylesheet loaded under the CSP (the button is styled, not the browser default).
  const background = await page.locator('#sign-out').evaluate((el) => getComputedStyle(el).borderTopStyle);
  assert.equal(background, 'solid');
  await page.screenshot({ path: path.join(shots, 'overview.png'), fullPage: true });

  // The state link, then the filter form, then a search by invoice.
  await click(page, '#count-needs-attention');
  assert.equal(await page.locator('#operations tbody tr').count(), 2);
  await noBlockingViolations(page, 'operations');
  // Both selected for one resolution: each one's facts first; without a reason the review stays.
  for (const box of await page.locator('input[type="checkbox"][name="id"]').all()) await box.check();
  await click(page, '#review-many');
  assert.equal(await page.locator('#side-by-side').count(), 2);
  assert.match(await page.locator('#attention-reason').textContent(), /idempotency key/);
  await noBlockingViolations(page, 'resolve together');
  const keptMany = await click(page, '#resolve-many-submit');
  assert.equal(keptMany.status(), 400);
  assert.match(await page.locator('#resolve-error').textContent(), /a reason is required/);
  assert.equal(await page.locator('#resolve-many').count(), 1);
  await noBlockingViolations(page, 'resolve together refused');
  await page.screenshot({ path: path.join(shots, 'resolve-many.png'), fullPage: true });
  await page.goto(`${base}/console/operations?status=needs_attention`);
  await page.selectOption('#status', 'cancelled');
  await click(page, '#filter');
  assert.equal(await page.locator('#operations tbody tr').count(), 0);
  assert.equal(await page.locator('#empty').count(), 1);
  await page.selectOption('#status', '');
  await page.fill('#q', env('PAYONCE_ATTENTION_INVOICE'));
  await click(page, '#filter');
  assert.equal(await page.locator('#operations tbody tr').count(), 1);
  await click(page, `a[href="/console/operations/${id}"]`);

  // The operation and its evidence chain.
  assert.equal((await page.locator('#operation-id').textContent()).trim(), id);
  const chain = await page.locator('#timeline').textContent();
  for (const step of ['create', 'approve', 'claim', 'submission_started', 'outcome_unknown', 'escalate', 'customer:cus_test']) {
    assert.ok(chain.includes(step), `the timeline shows ${step}`);
  }
  // What on-call decides with: the reason, the runbook's advice, both sides' facts, the raw error
  // behind a disclosure, and submissions as the processor saw them.
  assert.match(await page.locator('#attention-reason').textContent(), /no longer remembers its idempotency key/);
  assert.match(await page.locator('#advice').textContent(), /Search the processor's dashboard for metadata\[payonce_operation_id\]/);
  assert.equal(await page.locator('#advice li').count(), 3);
  assert.equal((await page.locator('#ledger-status').textContent()).trim(), 'needs_attention');
  assert.match(await page.locator('#processor-source').textContent(), /no processor reference/);
  assert.equal(await page.locator('#raw-error').getAttribute('open'), null, 'the raw error starts folded');
  assert.equal(await page.locator('#raw-error pre').first().isVisible(), false);
  await page.click('#raw-error summary');
  assert.equal(await page.locator('#raw-error pre').first().isVisible(), true);
  assert.equal((await page.locator('#submissions').textContent()).trim(), '1');
  assert.equal(await page.locator('#refund-totals').count(), 0, 'no refund figures on a payment that did not succeed');
  await noBlockingViolations(page, 'operation');
  await page.screenshot({ path: path.join(shots, 'operation.png'), fullPage: true });

  // Without a reason: refused, nothing changed, and on-call stays on the form with what they chose.
  await page.selectOption('#as', 'retry');
  const refused = await click(page, '#resolve-submit');
  assert.equal(refused.status(), 400);
  assert.equal((await page.locator('#error-code').textContent()).trim(), 'invalid_request');
  assert.match(await page.locator('#resolve-error').textContent(), /a reason is required/);
  assert.equal(await page.locator('#resolve').count(), 1, 'the form stays');
  assert.equal(await page.locator('#as').inputValue(), 'retry', 'the choice is kept');
  assert.equal(await page.locator('#reason').getAttribute('aria-invalid'), 'true');
  assert.match(await page.locator('h1 .state').textContent(), /needs_attention/);
  await noBlockingViolations(page, 'resolve refused');
  await page.screenshot({ path: path.join(shots, 'resolve-refused.png'), fullPage: true });
  await page.selectOption('#as', 'failed');
  await page.fill('#reason', 'No payment in the processor dashboard; customer told to retry.');
  const resolved = await click(page, '#resolve-submit');
  assert.equal(resolved.status(), 200);
  assert.match(await page.locator('h1 .state').textContent(), /failed/);
  const after = await page.locator('#timeline').textContent();
  assert.ok(after.includes('resolve_failed') && after.includes('on_call:alice'), after);
  assert.ok(after.includes('customer told to retry'));
  await noBlockingViolations(page, 'resolved');
  await page.screenshot({ path: path.join(shots, 'resolved.png'), fullPage: true });

  // A paid payment with its refunds, and a refund waiting for a person (approve and decline forms).
  await page.goto(`${base}/console/operations/${env('PAYONCE_PAYMENT_ID')}`);
  assert.match(await page.locator('#refund-totals').textContent(), /1 refund\(s\)/);
  await noBlockingViolations(page, 'payment with refunds');
  await page.screenshot({ path: path.join(shots, 'payment-refunds.png'), fullPage: true });
  await page.goto(`${base}/console/operations/${env('PAYONCE_REFUND_ID')}`);
  assert.equal(await page.locator('#approve-refund').count(), 1);
  assert.equal(await page.locator('#decline-refund').count(), 1);
  await noBlockingViolations(page, 'refund awaiting approval');
  await page.screenshot({ path: path.join(shots, 'refund-approval.png'), fullPage: true });

  // Another tenant's operation does not exist here.
  const other = await page.goto(`${base}/console/operations/${env('PAYONCE_OTHER_ID')}`);
  assert.equal(other.status(), 404);
  assert.equal((await page.locator('#error-code').textContent()).trim(), 'operation_not_found');
  await noBlockingViolations(page, 'refusal');

  // Sign out: the session is over.
  await page.goto(`${base}/console`);
  await click(page, '#sign-out');
  assert.equal(new URL(page.url()).pathname, '/console/sign-in');
  const gone = await page.goto(`${base}/console`);
  assert.equal(gone.status(), 401);
  assert.deepEqual(problems, []);
  await context.close();
});

test('a read-only on-call key sees the operation and cannot resolve it', async () => {
  const base = env('PAYONCE_CONSOLE_BASE');
  const id = env('PAYONCE_READ_ONLY_TARGET_ID');
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(NAVIGATION_TIMEOUT_MS);
  await page.goto(`${base}/console/sign-in`);
  await page.fill('#key', env('PAYONCE_READ_ONLY_KEY'));
  const signedIn = await click(page, '#sign-in');
  assert.equal(signedIn.status(), 200);
  await page.goto(`${base}/console/operations/${id}`);
  assert.match(await page.locator('#attention-reason').textContent(), /idempotency key/);
  assert.match(await page.locator('#read-only').textContent(), /read-only key/);
  assert.equal(await page.locator('#resolve').count(), 0, 'no resolve form');
  await noBlockingViolations(page, 'read-only operation');
  await page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), 'read-only.png'), fullPage: true });
  // The form it is not shown, posted anyway with its own session and token: refused.
  const csrf = await page.locator('input[name="csrf"]').first().getAttribute('value');
  const posted = await context.request.post(`${base}/console/operations/${id}/resolve`, {
    form: { csrf, as: 'failed', reason: 'trying anyway' },
    maxRedirects: 0,
  });
  assert.equal(posted.status(), 403);
  assert.equal(posted.headers()['payonce-error-code'], 'forbidden');
  // A refund waiting for a person: shown, with why there is no form.
  await page.goto(`${base}/console/operations/${env('PAYONCE_REFUND_ID')}`);
  assert.match(await page.locator('#refund-read-only').textContent(), /read-only/);
  assert.equal(await page.locator('#approve-refund').count(), 0);
  await noBlockingViolations(page, 'read-only refund');
  await page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), 'read-only-refund.png'), fullPage: true });
  await context.close();
});

test('the overview and lists update in place, pause while hidden and stop when the session ends', async () => {
  const base = env('PAYONCE_CONSOLE_BASE');
  const shots = env('PAYONCE_SCREENSHOT_DIR');
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  // The pages' timers run only when the test moves this clock; fetches are real.
  await context.clock.install();
  const page = await context.newPage();
  page.setDefaultTimeout(NAVIGATION_TIMEOUT_MS);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // The ended session's 401 and the inline script the CSP refuses below are expected.
    const expected = /^Failed to load resource: the server responded with a status of 401|Content Security Policy/;
    if (m.type() === 'error' && !expected.test(m.text())) problems.push(`console error: ${m.text()}`);
  });
  // A key that is not one: the form again, with why.
  await page.goto(`${base}/console/sign-in`);
  await page.fill('#key', 'po_on_call_not_a_key');
  const wrongKey = await click(page, '#sign-in');
  assert.equal(wrongKey.status(), 401);
  assert.match(await page.locator('#error').textContent(), /unknown, revoked or expired/);
  await noBlockingViolations(page, 'sign-in refused');
  await page.screenshot({ path: path.join(shots, 'sign-in-refused.png'), fullPage: true });
  await page.fill('#key', env('PAYONCE_ON_CALL_KEY'));
  await click(page, '#sign-in');
  // Main-frame navigations since the page under test was opened (the installed clock fakes
  // `performance`, so its navigation entries cannot be read).
  let navigations = 0;
  page.on('framenavigated', (frame) => { if (frame === page.mainFrame()) navigations += 1; });
  const opened = async () => {
    await page.evaluate(() => { window.__openedOnce = 'yes'; });
    navigations = 0;
  };
  const sameDocument = async () => {
    assert.equal(await page.evaluate(() => window.__openedOnce), 'yes', 'the page was not reloaded');
    assert.equal(navigations, 0, 'no navigation');
  };

  // The overview: a needs_attention operation made while it is open is counted in place.
  assert.equal(new URL(page.url()).pathname, '/console');
  await opened();
  const counted = Number((await page.locator('#count-needs-attention b').textContent()).trim());
  const first = await change('overview');
  await nextRefresh(page);
  await page.locator('#count-needs-attention b', { hasText: String(counted + 1) }).waitFor();
  await sameDocument();
  assert.match(await page.locator('#refresh-status').textContent(), /^Updated at /);

  // The list: the new row appears without a navigation.
  await page.goto(`${base}/console/operations?status=needs_attention`);
  await opened();
  const rows = await page.locator('#operations tbody tr').count();
  const id = await change('list');
  await nextRefresh(page);
  await page.locator(`#operations a[href="/console/operations/${id}"]`).waitFor();
  assert.equal(await page.locator('#operations tbody tr').count(), rows + 1);
  await sameDocument();
  await noBlockingViolations(page, 'operations, updated in place');
  await page.screenshot({ path: path.join(shots, 'live-list.png'), fullPage: true });

  // A box ticked: that region is kept as it is until it is unticked.
  await page.evaluate(() => { window.__region = document.getElementById('live-list'); });
  const stillTheSame = () => page.evaluate(() => window.__region === document.getElementById('live-list'));
  await page.check(`#pick-${id}`);
  await nextRefresh(page);
  await page.locator('#refresh-status', { hasText: 'except what you are working on' }).waitFor();
  assert.equal(await stillTheSame(), true);
  assert.equal(await page.isChecked(`#pick-${id}`), true);
  await page.uncheck(`#pick-${id}`);
  await page.focus('#q');
  await nextRefresh(page);
  await page.waitForFunction(() => window.__region !== document.getElementById('live-list'));

  // Hidden: no request at all, however long; visible again: one at once.
  let fetches = 0;
  const count = (r) => { if (r.resourceType() === 'fetch') fetches += 1; };
  page.on('request', count);
  await page.evaluate(() => {
    Object.defineProperty(document, 'hidden', { configurable: true, get: () => true });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  await page.clock.runFor(Number(env('PAYONCE_REFRESH_MS')) * 3);
  assert.equal(fetches, 0, 'nothing is fetched while the tab is hidden');
  await Promise.all([
    page.waitForResponse((r) => r.request().resourceType() === 'fetch'),
    page.evaluate(() => {
      Object.defineProperty(document, 'hidden', { configurable: true, get: () => false });
      document.dispatchEvent(new Event('visibilitychange'));
    }),
  ]);
  assert.equal(fetches, 1, 'visible again: one refresh at once');
  page.off('request', count);

  // The CSP still forbids inline script: one added to the page never runs.
  const refused = await page.evaluate(() => new Promise((resolve) => {
    document.addEventListener('securitypolicyviolation', (e) => resolve(e.effectiveDirective), { once: true });
    const inline = document.createElement('script');
    inline.textContent = 'window.__inlineRan = true;';
    document.body.append(inline);
  }));
  assert.match(refused, /^script-src/);
  assert.equal(await page.evaluate(() => window.__inlineRan), undefined);

  // Both new operations resolved together: the result page.
  await page.goto(`${base}/console/operations?status=needs_attention`);
  for (const pick of [first, id]) await page.check(`#pick-${pick}`);
  await click(page, '#review-many');
  await page.selectOption('#as', 'failed');
  await page.fill('#reason', 'Checked the dashboard: neither was paid.');
  const resolvedMany = await click(page, '#resolve-many-submit');
  assert.equal(resolvedMany.status(), 200);
  assert.equal(await page.locator('#resolved-many tbody tr').count(), 2);
  await noBlockingViolations(page, 'resolved together');
  await page.screenshot({ path: path.join(shots, 'resolved-many.png'), fullPage: true });

  // A processor outage recorded elsewhere shows on the open overview at its next refresh.
  await page.goto(`${base}/console`);
  await opened();
  assert.equal(await page.locator('#processor-outage').count(), 0);
  await change('outage');
  await nextRefresh(page);
  await page.locator('#processor-outage').waitFor();
  await sameDocument();
  await noBlockingViolations(page, 'overview during an outage');
  await page.screenshot({ path: path.join(shots, 'outage.png'), fullPage: true });

  // The session ends (its cookie is gone): the page stops and says how to sign in again.
  await context.clearCookies();
  const ended = await nextRefresh(page);
  assert.equal(ended.status(), 401);
  await page.locator('#session-ended').waitFor();
  assert.equal(await page.locator('#sign-in-again').getAttribute('href'), '/console/sign-in');
  assert.equal(await page.locator('#count-needs-attention').count(), 1, 'the last figures stay');
  await sameDocument();
  await noBlockingViolations(page, 'session ended');
  await page.screenshot({ path: path.join(shots, 'session-ended.png'), fullPage: true });
  fetches = 0;
  page.on('request', count);
  await page.clock.runFor(Number(env('PAYONCE_REFRESH_MS')) * 3);
  assert.equal(fetches, 0, 'no request after the session ended');
  assert.deepEqual(problems, []);
  await context.close();
});
