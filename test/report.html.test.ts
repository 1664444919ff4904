/**
 * report.html in a real headless browser (Debian's chromium through playwright-core): every figure renders, no
 * console errors, no network request leaves the page, and tooltips work. Skips with the reason when chromium is absent.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { chromium } from 'playwright-core';
import { writeReport } from '../src/report/write-report.ts';
import { syntheticResults } from './helpers/report-results.ts';

const CHROMIUM = process.env.SAFEKEEP_CHROMIUM ?? '/usr/bin/chromium';

test('report.html renders every figure offline in headless Chromium, with tooltips', async (t) => {
  if (!existsSync(CHROMIUM)) {
    t.skip(`needs Chromium at ${CHROMIUM} (apt-get install chromium, or set SAFEKEEP_CHROMIUM); not present here`);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-html-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const files = await writeReport(dir, syntheticResults());
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  t.after(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const consoleErrors: string[] = [];
  const pageErrors: string[] = [];
  const external: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  const url = pathToFileURL(files.html).href;
  await page.route('**/*', (route) => {
    const u = route.request().url();
    if (u === url || u.startsWith('data:')) return route.continue();
    external.push(u);
    return route.abort();
  });
  await page.goto(url, { timeout: 60000 });
  await page.waitForSelector('body[data-rendered]', { timeout: 60000 });
  assert.equal(await page.getAttribute('body', 'data-rendered'), '7');
  const figures = await page.$$eval('div.vega', (els) => els.map((e) => e.querySelectorAll('svg.marks').length));
  assert.deepEqual(figures, [1, 1, 1, 1, 1, 1, 1]);
  // the marks carry data: Figure 3 has its two lines, the steering chart its 4 × 3 bars
  const lines = await page.$$eval('#fig-0 svg .mark-line path', (els) => els.length);
  assert.ok(lines >= 2, `figure 3 lines: ${lines}`);
  const bars = await page.$$eval('div.vega[data-name="steering-outcomes"] svg .mark-rect path', (els) => els.length);
  assert.equal(bars, 12);
  const tables = await page.$$eval('section.table table tbody tr', (els) => els.length);
  assert.ok(tables > 20);
  // the protocol table is prose: it wraps inside the page, left-aligned (not the numeric tables' nowrap/right)
  // (a string: this file is compiled without the DOM types)
  const protocol = (await page.evaluate(`(() => {
    const el = document.querySelector('table.protocol');
    const css = getComputedStyle(el.querySelector('tbody td'));
    return { width: el.getBoundingClientRect().right, body: document.body.getBoundingClientRect().right, align: css.textAlign, wrap: css.whiteSpace,
      overflow: document.documentElement.scrollWidth > document.documentElement.clientWidth };
  })()`)) as { width: number; body: number; align: string; wrap: string; overflow: boolean };
  assert.ok(protocol.width <= protocol.body + 1, `protocol table ends at ${protocol.width}px, the page at ${protocol.body}px`);
  assert.equal(protocol.align, 'left');
  assert.equal(protocol.wrap, 'normal');
  assert.equal(protocol.overflow, false, 'no horizontal page scroll');

  // tooltip on hover over a Table 1 bar
  const bar = page.locator('div.vega[data-name="table1-bars"] svg .mark-rect path').first();
  await bar.hover();
  const tip = page.locator('#vg-tooltip-element');
  await tip.waitFor({ state: 'visible', timeout: 15000 });
  const text = await tip.innerText();
  assert.match(text, /AUROC/);
  assert.match(text, /95% CI low/);

  assert.deepEqual(pageErrors, []);
  assert.deepEqual(consoleErrors, []);
  assert.deepEqual(external, [], 'the page requested nothing outside itself');
});
