// Drives payonce's confirmation page in a real headless Chromium: approve, double submit, expired
// link, tampered details. The Rust integration test (tests/integration/api/browser.rs) starts the API,
// makes the links, runs this file with `node --test`, and then checks the ledger.
//
// Env: PAYONCE_CONFIRM_URL (valid link), PAYONCE_EXPIRED_URL (expired link), PAYONCE_TAMPER_URL (valid
// link to submit with a forged hash), PAYONCE_FORGED_HASH (the hash to forge), PAYONCE_EXPECT_AMOUNT
// (e.g. "20.48 USD"), PAYONCE_EXPECT_INVOICE, PAYONCE_SCREENSHOT_DIR (where screenshots go).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { chromium } from 'playwright-core';

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
  assert.equal((await a.page.locator('#amount').textContent()).trim(), env('PAYONCE_EXPECT_AMOUNT'));
  assert.equal((await a.page.locator('#invoice').textContent()).trim(), env('PAYONCE_EXPECT_INVOICE'));
  assert.equal((await a.page.locator('#currency').textContent()).trim(), 'USD');
  // The description holds markup; it must show as text, not become elements.
  assert.match(await a.page.locator('#description').textContent(), /<b>/);
  assert.equal(await a.page.locator('#description b').count(), 0);
  // The stylesheet loaded under the CSP (the button is styled, not the browser default).
  const background = await a.page.locator('#approve').evaluate((el) => getComputedStyle(el).backgroundColor);
  assert.equal(background, 'rgb(31, 111, 235)');
  await a.page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), 'confirm.png'), fullPage: true });

  // The customer opened the same email link twice.
  await b.page.goto(url);
  assert.equal(await heading(b.page), 'Confirm your payment');

  const [approved] = await Promise.all([a.page.waitForNavigation(), a.page.click('#approve')]);
  assert.equal(approved.status(), 200);
  assert.equal(await heading(a.page), 'Payment approved');
  assert.match(await a.page.locator('.result').textContent(), new RegExp(env('PAYONCE_EXPECT_AMOUNT')));
  await a.page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), 'approved.png'), fullPage: true });

  const [second] = await Promise.all([b.page.waitForNavigation(), b.page.click('#approve')]);
  assert.equal(second.status(), 409);
  assert.equal(await heading(b.page), 'This link was already used');

  // Back to the form: no-store means the page is fetched again, and the link is spent.
  await a.page.goto(url);
  assert.equal(await heading(a.page), 'This link was already used');
  assert.equal(await a.page.locator('form').count(), 0);
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
  assert.deepEqual(problems, []);
  await context.close();
});
