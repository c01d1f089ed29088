// Drives payonce's confirmation page in a real headless Chromium: approve, double submit, expired
// link, tampered details, the merchant, card and yen amount on a phone, and Decline. Every page and
// state is checked with axe-core (no serious or critical violation) and at 390 px wide (nothing
// wider than the screen). The Rust integration test (tests/integration/api/browser.rs) starts the
// API and the simulator, makes the links, runs this file with `node --test`, and then checks the
// ledger and the processor.
//
// Env: PAYONCE_CONFIRM_URL (valid link), PAYONCE_EXPIRED_URL (expired link), PAYONCE_TAMPER_URL (valid
// link to submit with a forged hash), PAYONCE_FORGED_HASH (the hash to forge), PAYONCE_EXPECT_AMOUNT
// (e.g. "$20.48"), PAYONCE_EXPECT_INVOICE, PAYONCE_MERCHANT (the tenant's display name),
// PAYONCE_JPY_URL (a link for JPY 1299 paid with the Mastercard test method), PAYONCE_DECLINE_URL (a
// link the customer declines), PAYONCE_SCREENSHOT_DIR (where screenshots go).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
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
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
});

after(async () => {
  await browser?.close();
});

async function newPage(context) {
  const page = await context.newPage();
  page.setDefaultTimeout(NAVIGATION_TIMEOUT_MS);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // A 4xx result page is logged by Chromium as a failed load; that is the page working. Anything else
    // (a CSP violation, a missing stylesheet) is a problem.
    const expected = /^Failed to load resource: the server responded with a status of 4(09|10)/;
    if (m.type() === 'error' && !expected.test(m.text())) problems.push(`console error: ${m.text()}`);
  });
  return { page, problems };
}

async function heading(page) {
  return (await page.locator('h1').textContent()).trim();
}

async function text(page, selector) {
  return (await page.locator(selector).textContent()).trim();
}

/** The page passes axe-core and fits a phone; then its screenshot is kept as `name`. */
async function checkAndKeep(page, name) {
  assert.deepEqual(await blockingViolations(page), [], `axe on ${name}`);
  const wide = page.viewportSize().width;
  await page.setViewportSize({ width: PHONE_WIDTH_PX, height: 844 });
  assert.equal(await overflowPx(page), 0, `${name} fits ${PHONE_WIDTH_PX} px`);
  assert.deepEqual(await blockingViolations(page), [], `axe on ${name} at ${PHONE_WIDTH_PX} px`);
  await page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), `${name}-phone.png`), fullPage: true });
  await page.setViewportSize({ width: wide, height: 900 });
  await page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), `${name}.png`), fullPage: true });
}

test('approve, then a double submit from a second tab approves nothing more', async () => {
  const url = env('PAYONCE_CONFIRM_URL');
  const context = await browser.newContext({ viewport: { width: 720, height: 900 } });
  const a = await newPage(context);
  const b = await newPage(context);

  const shown = await a.page.goto(url);
  assert.equal(shown.status(), 200);
  const headers = shown.headers();
  assert.equal(headers['cache-control'], 'no-store');
  assert.equal(headers['x-frame-options'], 'DENY');
  assert.match(headers['content-security-policy'], /default-src 'none'/);
  assert.equal(await heading(a.page), 'Confirm your payment');
  assert.equal(await text(a.page, '#merchant'), env('PAYONCE_MERCHANT'));
  assert.equal(await text(a.page, '#payee'), env('PAYONCE_MERCHANT'));
  assert.equal((await a.page.locator('#amount').textContent()).trim(), env('PAYONCE_EXPECT_AMOUNT'));
  assert.equal((await a.page.locator('#invoice').textContent()).trim(), env('PAYONCE_EXPECT_INVOICE'));
  assert.equal((await a.page.locator('#currency').textContent()).trim(), 'USD');
  // The description holds markup; it must show as text, not become elements.
  assert.match(await a.page.locator('#description').textContent(), /<b>/);
  assert.equal(await a.page.locator('#description b').count(), 0);
  // The stylesheet loaded under the CSP (the button is styled, not the browser default).
  const background = await a.page.locator('#approve').evaluate((el) => getComputedStyle(el).backgroundColor);
  assert.equal(background, 'rgb(31, 111, 235)');
  assert.equal(await a.page.locator('#decline').count(), 1);
  await checkAndKeep(a.page, 'confirm');

  // The customer opened the same email link twice.
  await b.page.goto(url);
  assert.equal(await heading(b.page), 'Confirm your payment');

  const [approved] = await Promise.all([a.page.waitForNavigation(), a.page.click('#approve')]);
  assert.equal(approved.status(), 200);
  assert.equal(await heading(a.page), 'Payment approved');
  assert.ok((await a.page.locator('.result').textContent()).includes(env('PAYONCE_EXPECT_AMOUNT')));
  await checkAndKeep(a.page, 'approved');

  const [second] = await Promise.all([b.page.waitForNavigation(), b.page.click('#approve')]);
  assert.equal(second.status(), 409);
  assert.equal(await heading(b.page), 'This link was already used');

  // Back to the form: no-store means the page is fetched again, and the link is spent.
  await a.page.goto(url);
  assert.equal(await heading(a.page), 'This link was already used');
  assert.equal(await a.page.locator('form').count(), 0);
  assert.equal(await text(a.page, '#merchant'), env('PAYONCE_MERCHANT'));
  assert.match(await text(a.page, '#help'), /^To get a new link or ask about this payment, contact /);
  await checkAndKeep(a.page, 'used');
  assert.deepEqual([...a.problems, ...b.problems], []);
  await context.close();
});

test('an expired link shows that it expired and offers no form', async () => {
  const context = await browser.newContext();
  const { page, problems } = await newPage(context);
  const response = await page.goto(env('PAYONCE_EXPIRED_URL'));
  assert.equal(response.status(), 410);
  assert.equal(await heading(page), 'This link has expired');
  assert.equal(await page.locator('form').count(), 0);
  // Not a dead end: the merchant's support contact says how to get a new link.
  assert.equal(await page.locator('#help a#support-url').count(), 1);
  assert.equal(await page.locator('#help a#support-email').count(), 1);
  await checkAndKeep(page, 'expired');
  assert.deepEqual(problems, []);
  await context.close();
});

test('tampered details are refused and nothing is approved', async () => {
  const context = await browser.newContext();
  const { page, problems } = await newPage(context);
  await page.goto(env('PAYONCE_TAMPER_URL'));
  assert.equal(await heading(page), 'Confirm your payment');
  const forged = env('PAYONCE_FORGED_HASH');
  await page.locator('input[name="details_hash"]').evaluate((el, value) => {
    el.value = value;
  }, forged);
  const [response] = await Promise.all([page.waitForNavigation(), page.click('#approve')]);
  assert.equal(response.status(), 409);
  assert.equal(await heading(page), 'The details did not match');
  await checkAndKeep(page, 'tampered');
  assert.deepEqual(problems, []);
  await context.close();
});

test('on a phone: the merchant, the card and yen as people read them', async () => {
  const context = await browser.newContext({ viewport: { width: PHONE_WIDTH_PX, height: 844 } });
  const { page, problems } = await newPage(context);
  const shown = await page.goto(env('PAYONCE_JPY_URL'));
  assert.equal(shown.status(), 200);
  assert.equal(await text(page, '#merchant'), env('PAYONCE_MERCHANT'));
  assert.equal(await text(page, '#amount'), '¥1,299');
  assert.equal(await text(page, '#card'), 'Mastercard ending in 4444');
  assert.equal(await text(page, '#currency'), 'JPY');
  assert.equal(await text(page, '#approve'), 'Approve ¥1,299');
  const body = await page.locator('main').textContent();
  for (const never of ['cus_', 'pm_card', 'op_']) assert.ok(!body.includes(never), `${never} on the page`);
  assert.equal(await overflowPx(page), 0);
  // Both buttons are on screen and big enough to tap.
  for (const id of ['#approve', '#decline']) {
    const box = await page.locator(id).boundingBox();
    assert.ok(box.height >= 44 && box.x >= 0 && box.x + box.width <= PHONE_WIDTH_PX, `${id} ${JSON.stringify(box)}`);
  }
  assert.deepEqual(await blockingViolations(page), []);
  await page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), 'confirm-jpy-phone.png'), fullPage: true });
  assert.deepEqual(problems, []);
  await context.close();
});

test('Decline ends the payment and spends the link', async () => {
  const context = await browser.newContext({ viewport: { width: 720, height: 900 } });
  const { page, problems } = await newPage(context);
  const url = env('PAYONCE_DECLINE_URL');
  await page.goto(url);
  const [declined] = await Promise.all([page.waitForNavigation(), page.click('#decline')]);
  assert.equal(declined.status(), 200);
  assert.equal(await heading(page), 'Payment declined');
  assert.match(await text(page, '.result'), /Nothing will be charged/);
  await checkAndKeep(page, 'declined');
  const again = await page.goto(url);
  assert.equal(again.status(), 409);
  assert.equal(await heading(page), 'This link was already used');
  assert.equal(await page.locator('form').count(), 0);
  assert.deepEqual(problems, []);
  await context.close();
});
