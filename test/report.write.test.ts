import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { writeReport } from '../src/report/write-report.ts';
import { COLORS } from '../src/report/theme.ts';
import { LAYER_AXIS_TITLE } from '../src/report/figures/spec.ts';
import { csvField } from '../src/report/tables.ts';
import { SafekeepError } from '../src/util/errors.ts';
import { countColor, countInk, decodePng } from './helpers/png.ts';
import { syntheticResults } from './helpers/report-results.ts';

/** RFC 4180 reader (independent of the writer). */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let q = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (q) {
      if (ch === '"' && text[i + 1] === '"') (cell += '"'), i++;
      else if (ch === '"') q = false;
      else cell += ch;
    } else if (ch === '"') q = true;
    else if (ch === ',') row.push(cell), (cell = '');
    else if (ch === '\n') row.push(cell), rows.push(row), (row = []), (cell = '');
    else cell += ch;
  }
  return rows;
}

test('writeReport writes tables, figures, results and a self-contained report.html', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-report-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const res = syntheticResults();
  const files = await writeReport(dir, res);

  // tables: every table in three formats
  for (const name of ['table1', 'table2', 'auroc-by-layer', 'schema-cosines', 'first-token', 'norms', 'table3-steering']) {
    for (const ext of ['md', 'csv', 'json']) assert.ok(existsSync(join(dir, 'tables', `${name}.${ext}`)), `${name}.${ext}`);
  }
  const csv = parseCsv(readFileSync(join(dir, 'tables', 'table1.csv'), 'utf8'));
  assert.deepEqual(csv[0], ['config', 'label', 'layer', 'n', 'cross_auroc', 'cross_lo', 'cross_hi', 'diff_vs_chatbot', 'diff_lo', 'diff_hi', 'within_auroc', 'within_lo', 'within_hi']);
  assert.equal(csv.length, 1 + res.table1.length);
  res.table1.forEach((r, i) => {
    const c = csv[i + 1]!;
    assert.equal(c[0], r.config);
    assert.equal(Number(c[3]), r.cross.n);
    assert.equal(Number(c[4]), r.cross.auroc);
    assert.equal(Number(c[5]), r.cross.lo);
    assert.equal(Number(c[6]), r.cross.hi);
    assert.equal(Number(c[10]), r.within.auroc);
  });
  const md = readFileSync(join(dir, 'tables', 'table1.md'), 'utf8');
  const full = res.table1.find((r) => r.config === 'agent-full')!;
  assert.ok(md.includes(`| + tools (full agent) | ${full.cross.n} | ${full.cross.auroc.toFixed(3)} [${full.cross.lo.toFixed(3)}, ${full.cross.hi.toFixed(3)}] |`), md);
  assert.deepEqual(JSON.parse(readFileSync(join(dir, 'tables', 'table2.json'), 'utf8')).rows, res.table2);
  const steer = parseCsv(readFileSync(join(dir, 'tables', 'table3-steering.csv'), 'utf8'));
  // α = 8: 31/40 invalid = 77.5 %
  const inv8 = steer.find((r) => r[3] === '8' && r[6] === 'invalid')!;
  assert.equal(Number(inv8[8]), 77.5);
  assert.ok(Number(inv8[9]) < 77.5 && Number(inv8[10]) > 77.5);
  assert.deepEqual(JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')), res);
  assert.deepEqual(JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')), res.manifest);

  // figures: SVG with the axis titles, PNG that decodes and shows the data colours
  const svg3 = readFileSync(join(dir, 'figures', 'figure3-schema-cosine.svg'), 'utf8');
  assert.ok(svg3.includes('Cosine with the chatbot refusal direction r(ℓ)'));
  assert.ok(svg3.includes(LAYER_AXIS_TITLE));
  assert.ok(svg3.includes('Harmful requests: cos(R_harmful, r)'), 'legend label is not truncated');
  const svg4 = readFileSync(join(dir, 'figures', 'figure4-first-token.svg'), 'utf8');
  assert.ok(svg4.includes('Projection h · r̂(ℓ) (residual units)') && svg4.includes('Tool specification'));
  const svgSteer = readFileSync(join(dir, 'figures', 'steering-outcomes.svg'), 'utf8');
  assert.ok(svgSteer.includes('Share of generations (%)') && svgSteer.includes('Valid harmful tool call'));
  const pngs = readdirSync(join(dir, 'figures')).filter((f) => f.endsWith('.png'));
  assert.equal(pngs.length, 7);
  assert.equal(files.figures.length, 14);
  for (const f of pngs) {
    const img = decodePng(readFileSync(join(dir, 'figures', f)));
    const svg = readFileSync(join(dir, 'figures', f.replace(/\.png$/, '.svg')), 'utf8');
    const w = Number(/width="(\d+(?:\.\d+)?)"/.exec(svg)![1]);
    assert.equal(img.width, Math.round(2 * w), f);
    assert.ok(countInk(img) > 5000, `${f} has content`);
  }
  const fig3 = decodePng(readFileSync(join(dir, 'figures', 'figure3-schema-cosine.png')));
  assert.ok(countColor(fig3, COLORS.harmful) > 500 && countColor(fig3, COLORS.benign) > 500);
  const steerPng = decodePng(readFileSync(join(dir, 'figures', 'steering-outcomes.png')));
  assert.ok(countColor(steerPng, COLORS.invalid) > 5000, 'invalid share drawn');

  // report.html: self-contained — no external resource reference outside the inlined libraries
  const html = readFileSync(files.html, 'utf8');
  // the inlined libraries contain no '</script', so this strips exactly the four script bodies
  const outsideScripts = html.replace(/<script>[\s\S]*?<\/script>/g, '<script></script>');
  assert.equal((outsideScripts.match(/<script/g) ?? []).length, 4, 'vega, vega-lite, vega-embed, figures');
  assert.ok(!/<[a-z]+[^>]*\s(src|href)\s*=/i.test(outsideScripts), 'no src/href resources');
  assert.ok(!/url\(/i.test(outsideScripts), 'no CSS url()');
  assert.ok(!/https?:\/\//.test(outsideScripts), 'no URL in the page outside inlined JS');
  assert.ok(html.includes('SYNTHETIC'));
  assert.equal((html.match(/class="vega"/g) ?? []).length, 7);
  assert.ok(html.includes(`<td>${full.label}</td>`));
});

test('writeReport rejects malformed results with a clear SafekeepError', async () => {
  const res = syntheticResults();
  res.lStar.layer = 99;
  await assert.rejects(writeReport(mkdtempSync(join(tmpdir(), 'safekeep-bad-')), res), (e) => e instanceof SafekeepError && /ℓ\* = 99/.test(e.message));
  assert.equal(csvField('a,"b"'), '"a,""b"""');
});

test('writeReport with steering only (no reproduce run yet): Table 3 and its figure, nothing empty', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-report-min-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const full = syntheticResults();
  const res = {
    version: 1 as const,
    model: 'm',
    layers: full.layers,
    dModel: full.dModel,
    lStar: { layer: 3, method: 'given by the steering run', cvAuroc: [] },
    bootstrap: { reps: 0, seed: 0, level: 0.95 },
    curves: [],
    table1: [],
    table2: [],
    norms: { directions: [], meanHidden: [] },
    steering: full.steering,
    manifest: {},
  };
  const files = await writeReport(dir, res);
  assert.deepEqual(readdirSync(join(dir, 'tables')).sort(), ['table3-steering.csv', 'table3-steering.json', 'table3-steering.md']);
  assert.deepEqual(files.figures.map((f) => f.slice(dir.length + 1)), ['figures/steering-outcomes.svg', 'figures/steering-outcomes.png']);
  const md = readFileSync(files.markdown, 'utf8');
  assert.ok(!md.includes('Table 1'), 'no empty Table 1');
  assert.ok(md.includes('α=8: refusal 20.0%, valid 2.5%, invalid 77.5%'));
});
