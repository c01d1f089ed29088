// Customer verification in a real headless Chromium (issue 13). The Rust integration test
// (tests/integration/api/browser.rs) sets up the tenants, links and codes, runs this file with
// `node --test`, and then checks the ledger and the processor.
//
// Env: PAYONCE_LEAKED_URL (a link with no customer proof, as an assistant might hold it),
// PAYONCE_FORGED_URL (the link with an assertion the assistant signed itself), PAYONCE_CODE_URL (a
// one-time-code tenant's link), PAYONCE_CODE (its code, as the test's tenant endpoint received it),
// PAYONCE_WRONG_CODE, PAYONCE_SCREENSHOT_DIR.
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
    // A 4xx refusal page is logged by Chromium as a failed load; that is the page working.
    const expected = /^Failed to load resource: the server responded with a status of 4\d\d/;
    if (m.type() === 'error' && !expected.test(m.text())) problems.push(`console error: ${m.text()}`);
  });
  return { page, problems };
}

async function heading(page) {
  return (await page.locator('h1').textContent()).trim();
}

async function errorCode(page) {
  return (await page.locator('#error-code').textContent()).trim();
}

test('a link without the customer proof shows no form and approves nothing', async () => {
  const context = await browser.newContext();
  const { page, problems } = await newPage(context);
  for (const [url, code] of [
    [env('PAYONCE_LEAKED_URL'), 'assertion_required'],
    [env('PAYONCE_FORGED_URL'), 'assertion_bad_signature'],
  ]) {
    const response = await page.goto(url);
    assert.equal(response.status(), 401, url);
    assert.equal(response.headers()['payonce-error-code'], code);
    assert.equal(await errorCode(page), code);
    assert.equal(await page.locator('form').count(), 0);
    assert.deepEqual(await blockingViolations(page), [], code);
  }
  assert.equal(await heading(page), 'We could not confirm it is you');
  await page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), 'refused.png'), fullPage: true });
  assert.deepEqual(problems, []);
  await context.close();
});

test('a customer types a wrong code, then the right one, and approves once', async () => {
  const context = await browser.newContext({ viewport: { width: 720, height: 900 } });
  const { page, problems } = await newPage(context);
  const url = env('PAYONCE_CODE_URL');

  const shown = await page.goto(url);
  assert.equal(shown.status(), 200);
  assert.equal(await heading(page), 'Confirm your payment');
  assert.equal(await page.locator('input[name="code"]').getAttribute('autocomplete'), 'one-time-code');
  await page.locator('#code').fill(env('PAYONCE_WRONG_CODE'));
  const [wrong] = await Promise.all([page.waitForNavigation(), page.click('#approve')]);
  assert.equal(wrong.status(), 401);
  assert.equal(await errorCode(page), 'code_wrong');
  // No dead end: the same form, the error and the attempts left above it, the field marked.
  assert.equal(await heading(page), 'Confirm your payment');
  assert.match(await page.locator('#error').textContent(), /4 attempts left/);
  assert.equal(await page.locator('#error').getAttribute('role'), 'alert');
  assert.equal(await page.locator('#code').getAttribute('aria-invalid'), 'true');
  assert.deepEqual(await blockingViolations(page), []);
  await page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), 'code-wrong.png'), fullPage: true });
  await page.setViewportSize({ width: PHONE_WIDTH_PX, height: 844 });
  assert.equal(await overflowPx(page), 0);
  assert.deepEqual(await blockingViolations(page), []);
  await page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), 'code-wrong-phone.png'), fullPage: true });
  await page.setViewportSize({ width: 720, height: 900 });

  // The right code, typed on the same page.
  await page.locator('#code').fill(env('PAYONCE_CODE'));
  await page.screenshot({ path: path.join(env('PAYONCE_SCREENSHOT_DIR'), 'code.png'), fullPage: true });
  const [approved] = await Promise.all([page.waitForNavigation(), page.click('#approve')]);
  assert.equal(approved.status(), 200);
  assert.equal(await heading(page), 'Payment approved');
  assert.deepEqual(await blockingViolations(page), []);

  // The code and its link are spent.
  const again = await page.goto(url);
  assert.equal(again.status(), 409);
  assert.equal(await errorCode(page), 'link_used');
  assert.deepEqual(problems, []);
  await context.close();
});
