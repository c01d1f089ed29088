// Accessibility and small-screen checks shared by the browser tests: axe-core (from npm, pinned in
// package-lock.json) run inside the page, and a check that nothing is wider than the viewport.
//
// The pages' CSP forbids inline script (the console allows only its own static file), so axe is not
// added as a <script>: Playwright's evaluate runs through the DevTools protocol, which the page's CSP
// does not govern, and the page itself stays as served.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const AXE_SOURCE = await readFile(require.resolve('axe-core/axe.min.js'), 'utf8');

/** The impacts a page must never have. */
export const BLOCKING_IMPACTS = ['serious', 'critical'];

/** The narrowest phone viewport every page must fit (an iPhone 12-15's CSS width). */
export const PHONE_WIDTH_PX = 390;

/** axe-core's serious and critical violations on the page, one line each (empty: none). */
export async function blockingViolations(page) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) {
    await page.evaluate(AXE_SOURCE);
  }
  const result = await page.evaluate(async () =>
    window.axe.run(document, { resultTypes: ['violations'] }),
  );
  return result.violations
    .filter((v) => BLOCKING_IMPACTS.includes(v.impact))
    .map((v) => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

/** How many CSS pixels the page is wider than its viewport (0: it fits). */
export async function overflowPx(page) {
  return page.evaluate(() => Math.max(0, document.documentElement.scrollWidth - window.innerWidth));
}
