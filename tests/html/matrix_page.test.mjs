// matrix_page.test.mjs: opens bih's matrix.html in headless Chromium and checks what a user sees.
//
// Usage: node matrix_page.test.mjs MATRIX_DIR SCREENSHOT.png
// MATRIX_DIR holds matrix.html and matrix.json from the same `bih matrix` run; matrix.json is the
// truth the page is checked against (every entry's verdict, counts and colour, the missing
// scenarios, the environment warning). Uses the system Chromium, never downloads a browser, and
// fails if the page asks for anything outside file://.
import {chromium} from 'playwright-core';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [matrixDir, screenshotPath] = process.argv.slice(2);
if (!matrixDir || !screenshotPath) {
  console.error('usage: node matrix_page.test.mjs MATRIX_DIR SCREENSHOT.png');
  process.exit(2);
}
const matrix = JSON.parse(fs.readFileSync(path.join(matrixDir, 'matrix.json'), 'utf8'));

// The background a user sees per verdict (harness/matrix_html.cpp's palette).
const kColours = {
  invariant: 'rgb(166, 219, 160)',        // green
  batch_variant: 'rgb(244, 162, 97)',     // orange
  nondeterministic: 'rgb(195, 166, 224)', // purple
  error: 'rgb(139, 0, 0)',                // dark red
  unsupported: 'rgb(208, 208, 208)',      // grey
};

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bih-chromium-'));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: {width: 1400, height: 900},
});
let failures = 0;
function check(name, fn) {
  return Promise.resolve()
      .then(fn)
      .then(() => console.log(`ok   ${name}`))
      .catch((e) => {
        failures++;
        console.log(`FAIL ${name}\n     ${e.message.split('\n').join('\n     ')}`);
      });
}

try {
  const page = await context.newPage();
  const foreign = [];
  page.on('request', (r) => {
    if (!r.url().startsWith('file://')) foreign.push(r.url());
  });
  await page.goto('file://' + path.resolve(matrixDir, 'matrix.html'), {waitUntil: 'load'});

  const entries = [];
  for (const table of matrix.tables) {
    for (const cell of table.cells) {
      for (const e of cell.entries) entries.push({...e, table, cell});
    }
  }

  await check('every report is a cell entry with its verdict, counts and colour', async () => {
    assert.ok(entries.length > 0, 'matrix.json has no entries');
    const seen = await page.$$eval('details.entry', (els) => els.map((el) => ({
      id: el.dataset.id,
      summary: el.querySelector('summary').innerText,
      background: getComputedStyle(el).backgroundColor,
      visible: el.getBoundingClientRect().height > 0,
    })));
    assert.equal(seen.length, entries.length, 'entries on the page vs in matrix.json');
    for (const e of entries) {
      const s = seen.find((x) => x.id === e.id);
      assert.ok(s, `no entry for ${e.id}`);
      assert.ok(s.visible, `${e.id} is not visible`);
      assert.ok(s.summary.includes(e.verdict), `${e.id}: "${s.summary}" lacks ${e.verdict}`);
      assert.ok(s.summary.includes(e.counts), `${e.id}: "${s.summary}" lacks ${e.counts}`);
      assert.equal(s.background, kColours[e.verdict], `${e.id}: colour of ${e.verdict}`);
    }
  });

  await check('each entry sits in the table cell of its row and column', async () => {
    for (const e of entries) {
      const where = await page.$eval(`details.entry[data-id="${e.id}"]`, (el) => {
        const td = el.closest('td');
        const tr = td.closest('tr');
        const table = td.closest('table');
        const col = [...tr.children].indexOf(td);
        return {
          row: tr.querySelector('th').innerText,
          column: table.querySelectorAll('thead th')[col].innerText,
          split: el.closest('section').dataset.split,
        };
      });
      assert.equal(where.row, e.table.rows[e.cell.row].label, `${e.id}: row`);
      assert.equal(where.column, e.table.columns[e.cell.column].label, `${e.id}: column`);
      assert.equal(where.split, e.table.split.label, `${e.id}: table`);
    }
  });

  await check('the five verdicts have five different colours', async () => {
    const legend = await page.$$eval('.legend span', (els) => els.map((el) => ({
      text: el.innerText, background: getComputedStyle(el).backgroundColor})));
    for (const [verdict, colour] of Object.entries(kColours)) {
      const l = legend.find((x) => x.text === verdict);
      assert.ok(l, `legend lacks ${verdict}`);
      assert.equal(l.background, colour, `legend colour of ${verdict}`);
    }
    assert.equal(new Set(Object.values(kColours)).size, 5);
  });

  await check('missing scenarios and the environment warning are shown as matrix.json says',
              async () => {
    const missing = await page.$$eval('#missing li', (els) => els.map((el) => el.innerText));
    assert.deepEqual(missing, matrix.missing_ids);
    if (matrix.missing_ids.length) assert.ok(await page.isVisible('#missing'));
    assert.equal(await page.isVisible('#mixed-environment'), matrix.mixed_environment);
  });

  await check('expanding a cell shows its comparisons and a heat map of its first divergences',
              async () => {
    const e = entries.find((x) => x.comparisons.some((c) => c.first_divergences.length > 0));
    assert.ok(e, 'no entry with first divergences in the fixture');
    const entry = page.locator(`details.entry[data-id="${e.id}"]`);
    const heatMap = entry.locator('svg.heatmap').first();
    assert.equal(await heatMap.isVisible(), false, 'heat map visible before expanding');
    await entry.locator('summary').click();
    assert.equal(await heatMap.isVisible(), true, 'heat map not visible after expanding');
    const box = await heatMap.boundingBox();
    assert.ok(box.width > 50 && box.height > 20, `heat map box ${JSON.stringify(box)}`);
    const c = e.comparisons.find((x) => x.first_divergences.length > 0);
    assert.equal(await heatMap.locator('rect.mark').count(), c.first_divergences.length,
                 'one mark per first divergence');
    const text = await entry.locator('.details').innerText();
    assert.ok(text.includes(c.summary), `details lack "${c.summary}"`);
    const background = await entry.locator('.details').evaluate(
        (el) => getComputedStyle(el).backgroundColor);
    assert.equal(background, 'rgb(255, 255, 255)', 'details panel is readable (white)');
  });

  await check('an error entry expands to its reason', async () => {
    const e = entries.find((x) => x.verdict === 'error');
    if (!e) {
      assert.ok(!process.env.BIH_REQUIRE_ERROR_CELL, 'no error entry in the fixture');
      return;  // a published matrix without failures
    }
    const entry = page.locator(`details.entry[data-id="${e.id}"]`);
    await entry.locator('summary').click();
    assert.ok(await entry.locator('pre.reason').isVisible());
    assert.equal(await entry.locator('pre.reason').innerText(), e.reason);
  });

  await check('the page loaded nothing from the network', async () => {
    assert.deepEqual(foreign, []);
  });

  fs.mkdirSync(path.dirname(screenshotPath), {recursive: true});
  await page.screenshot({path: screenshotPath, fullPage: true});
  console.log(`screenshot: ${screenshotPath}`);
} finally {
  await context.close();
  fs.rmSync(userDataDir, {recursive: true, force: true});
}
if (failures) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log('all checks passed');
