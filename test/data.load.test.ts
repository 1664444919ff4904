/**
 * loadPairSet on user files: every format (scenario file, flat JSON list, {pairs}, JSONL, folder with a tool
 * library) and every bad-row error names the file and the row and says what is wrong.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPairSet } from '../src/data/load.ts';
import { datasetCandidates, locateDataset } from '../src/data/locate.ts';
import { dataDirsEnv } from '../src/cli/env.ts';
import { SafekeepError } from '../src/util/errors.ts';
import type { Pair, ToolSpec } from '../src/data/types.ts';

const tool = (name: string, extra: Record<string, unknown> = {}): ToolSpec => ({
  type: 'function',
  function: {
    name,
    description: `does ${name}`,
    parameters: { type: 'object', properties: { x: { type: 'string' } }, required: ['x'], ...extra },
  },
});

const pair = (id: string, over: Partial<Pair> = {}): Pair => ({
  id,
  category: 'fraud',
  tools: [tool('a'), tool('b')],
  harmful: { prompt: `harmful ${id}`, targetFunctions: ['a'] },
  benign: { prompt: `benign ${id}`, targetFunctions: ['a', 'b'] },
  ...over,
});

function tmp(): string {
  return mkdtempSync(join(tmpdir(), 'sk-data-'));
}

/** Asserts a SafekeepError whose message contains every fragment. */
async function rejects(p: Promise<unknown>, ...fragments: (string | RegExp)[]): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof SafekeepError, `not a SafekeepError: ${String(e)}`);
    for (const f of fragments) {
      if (typeof f === 'string') assert.ok(e.message.includes(f), `'${e.message}' lacks '${f}'`);
      else assert.match(e.message, f);
    }
    return true;
  });
}

test('formats: JSON list, {pairs}, JSONL and a folder all give the same pairs', async () => {
  const d = tmp();
  try {
    const pairs = [pair('p1'), pair('p2')];
    writeFileSync(join(d, 'list.json'), JSON.stringify(pairs));
    writeFileSync(join(d, 'obj.json'), JSON.stringify({ pairs }));
    writeFileSync(join(d, 'rows.jsonl'), pairs.map((p) => JSON.stringify(p)).join('\n') + '\n\n');
    for (const f of ['list.json', 'obj.json', 'rows.jsonl']) {
      const s = await loadPairSet(join(d, f));
      assert.deepEqual(s.pairs, pairs, f);
    }
    // the three files together define p1/p2 three times: duplicate ids
    await rejects(loadPairSet(d), "duplicate pair id 'p1'", 'list.json', 'obj.json');
  } finally { rmSync(d, { recursive: true, force: true }); }
});

test('scenario format: tools from the folder library or inline, ids <scenario>-<k>, category inherited', async () => {
  const d = tmp();
  try {
    writeFileSync(join(d, 'tools.json'), JSON.stringify({ tools: [tool('send_email')] }));
    writeFileSync(join(d, 'cat.json'), JSON.stringify({
      category: 'privacy',
      scenarios: [{
        id: 'sc',
        tools: ['send_email', tool('lookup')],
        pairs: [
          { harmful: { prompt: 'h1', targetFunctions: ['lookup', 'send_email'] }, benign: { prompt: 'b1', targetFunctions: ['send_email'] } },
          { id: 'custom', category: 'fraud', harmful: { prompt: 'h2', targetFunctions: ['lookup'] }, benign: { prompt: 'b2', targetFunctions: ['lookup'] } },
        ],
      }],
    }));
    const s = await loadPairSet(d);
    assert.deepEqual(s.pairs.map((p) => [p.id, p.category]), [['sc-1', 'privacy'], ['custom', 'fraud']]);
    assert.deepEqual(s.pairs[0]!.tools.map((t) => t.function.name), ['send_email', 'lookup']);
    assert.deepEqual(s.pairs[0]!.tools[0], tool('send_email'));
  } finally { rmSync(d, { recursive: true, force: true }); }
});

test('bad rows: missing fields, unknown target tool, invalid schema — file and row named', async () => {
  const d = tmp();
  try {
    const f = join(d, 'rows.jsonl');
    const write = (rows: unknown[]): void => writeFileSync(f, rows.map((r) => JSON.stringify(r)).join('\n'));

    const noBenign: Record<string, unknown> = { ...pair('p2') };
    delete noBenign.benign;
    write([pair('p1'), noBenign]);
    await rejects(loadPairSet(f), `${f}:2`, "'p2'", 'missing "benign"');

    write([pair('p1'), pair('p2', { harmful: { prompt: 'x', targetFunctions: ['nope'] } })]);
    await rejects(loadPairSet(f), `${f}:2`, "target function 'nope'", 'a, b');

    write([pair('p1', { category: '' })]);
    await rejects(loadPairSet(f), `${f}:1`, 'missing "category"');

    write([pair('p1', { harmful: { prompt: '  ', targetFunctions: ['a'] } })]);
    await rejects(loadPairSet(f), `${f}:1`, 'harmful', 'empty "prompt"');

    write([pair('p1', { benign: { prompt: 'b', targetFunctions: [] } })]);
    await rejects(loadPairSet(f), `${f}:1`, 'benign', 'targetFunctions');

    // invalid JSON Schema: a type that does not exist (caught by the 2020-12 meta-schema)
    write([pair('p1'), pair('p2'), pair('p3', { tools: [tool('a'), tool('b', { properties: { x: { type: 'strng' } } })] })]);
    await rejects(loadPairSet(f), `${f}:3`, "tool 'b'", 'not a valid JSON Schema', '/properties/x/type');

    // a $ref to nothing: valid against the meta-schema, but not a usable schema
    write([pair('p1', { tools: [tool('a', { properties: { x: { $ref: '#/$defs/missing' } } }), tool('b')] })]);
    await rejects(loadPairSet(f), `${f}:1`, "tool 'a'", 'not a usable JSON Schema', '#/$defs/missing');

    // a $ref that resolves is fine
    write([pair('p1', { tools: [tool('a', { $defs: { s: { type: 'string' } }, properties: { x: { $ref: '#/$defs/s' } } }), tool('b')] })]);
    assert.equal((await loadPairSet(f)).pairs.length, 1);

    // required names a property that is not declared
    write([pair('p1', { tools: [tool('a', { required: ['y'] }), tool('b')] })]);
    await rejects(loadPairSet(f), `${f}:1`, "required names 'y'");

    // parameters must be an object schema
    write([pair('p1', { tools: [{ type: 'function', function: { name: 'a', description: '', parameters: { type: 'string' } } }] })]);
    await rejects(loadPairSet(f), `${f}:1`, 'parameters.type must be "object"');

    // a bad tool name
    write([pair('p1', { tools: [tool('bad name')] })]);
    await rejects(loadPairSet(f), `${f}:1`, 'not a valid function name');

    // identical harmful and benign prompts
    write([pair('p1', { benign: { prompt: 'harmful p1', targetFunctions: ['a'] } })]);
    await rejects(loadPairSet(f), `${f}:1`, 'identical');

    // duplicate ids within one file
    write([pair('p1'), pair('p1')]);
    await rejects(loadPairSet(f), `${f}:2`, "duplicate pair id 'p1'", `first defined at ${f}:1`);

    // broken JSON: line number of the broken row
    writeFileSync(f, JSON.stringify(pair('p1')) + '\n{"id": "p2", \n');
    await rejects(loadPairSet(f), `${f}:2`, 'invalid JSON');
  } finally { rmSync(d, { recursive: true, force: true }); }
});

test('bad scenario files: unknown library tool, missing pairs, JSON syntax error with line:column', async () => {
  const d = tmp();
  try {
    const f = join(d, 'cat.json');
    writeFileSync(f, JSON.stringify({ category: 'hate', scenarios: [{ id: 's1', tools: ['ghost'], pairs: [{}] }] }));
    await rejects(loadPairSet(f), f, "scenario 1 ('s1')", "'ghost'", 'tools.json');

    writeFileSync(f, JSON.stringify({ category: 'hate', scenarios: [{ id: 's1', tools: [tool('a')], pairs: [] }] }));
    await rejects(loadPairSet(f), "scenario 1 ('s1')", 'missing "pairs"');

    writeFileSync(f, JSON.stringify({
      category: 'hate',
      scenarios: [{ id: 's1', tools: [tool('a')], pairs: [
        { harmful: { prompt: 'h', targetFunctions: ['a'] }, benign: { prompt: 'b', targetFunctions: ['a'] } },
        { harmful: { prompt: 'h2', targetFunctions: ['zzz'] }, benign: { prompt: 'b2', targetFunctions: ['a'] } },
      ] }],
    }));
    await rejects(loadPairSet(f), "scenario 1 ('s1'), pair 2", "(id 's1-2')", "target function 'zzz'");

    writeFileSync(f, '{\n  "category": "hate",\n  "scenarios": [,]\n}\n');
    await rejects(loadPairSet(f), `${f}:3:`, 'invalid JSON');

    writeFileSync(f, JSON.stringify({ something: 1 }));
    await rejects(loadPairSet(f), f, 'not a pair file');
  } finally { rmSync(d, { recursive: true, force: true }); }
});

test('unknown source and missing datasets: one clear message', async () => {
  await rejects(loadPairSet('no/such/file.jsonl'), "data source 'no/such/file.jsonl' not found", "'pairs', 'agentharm'");
  const env = dataDirsEnv({ SAFEKEEP_DATA: '/nonexistent-a', SAFEKEEP_SHARED: '/nonexistent-b' });
  const c = datasetCandidates('agentharm', env);
  assert.equal(c[0], join('/nonexistent-a', 'agentharm'));
  assert.ok(c[1]!.endsWith(join('data', 'agentharm')));
  assert.equal(c[2], join('/nonexistent-b', 'data', 'agentharm'));
  assert.throws(() => locateDataset('no-such-dataset', env), (e: unknown) =>
    e instanceof SafekeepError && e.message.includes('safekeep data pull no-such-dataset') && e.message.includes('/nonexistent-a'));
});

test('SAFEKEEP_DATA takes precedence over data/ and ../shared', () => {
  const d = tmp();
  try {
    mkdirSync(join(d, 'agentharm'));
    writeFileSync(join(d, 'agentharm', 'tools.json'), '{}');
    assert.equal(locateDataset('agentharm', dataDirsEnv({ SAFEKEEP_DATA: d })), join(d, 'agentharm'));
  } finally { rmSync(d, { recursive: true, force: true }); }
});

test('the set hash ignores key order but not content', async () => {
  const d = tmp();
  try {
    const p = pair('p1');
    const reordered = { benign: p.benign, harmful: p.harmful, tools: p.tools, category: p.category, id: p.id };
    writeFileSync(join(d, 'a.json'), JSON.stringify([p]));
    writeFileSync(join(d, 'b.json'), JSON.stringify([reordered]));
    writeFileSync(join(d, 'c.json'), JSON.stringify([pair('p1', { category: 'hate' })]));
    const [a, b, c] = await Promise.all(['a', 'b', 'c'].map((n) => loadPairSet(join(d, `${n}.json`))));
    assert.equal(a!.hash, b!.hash);
    assert.notEqual(a!.hash, c!.hash);
  } finally { rmSync(d, { recursive: true, force: true }); }
});

test('jsonErrorOffset: -1 on valid JSON (incl. every bundled file), V8\'s position where V8 reports one', async () => {
  const { jsonErrorOffset } = await import('../src/data/jsonfile.ts');
  const { readdirSync, readFileSync } = await import('node:fs');
  const { bundledPairsDir } = await import('../src/data/locate.ts');
  for (const f of readdirSync(bundledPairsDir).filter((x) => x.endsWith('.json'))) {
    assert.equal(jsonErrorOffset(readFileSync(join(bundledPairsDir, f), 'utf8')), -1, f);
  }
  for (const ok of ['0', '-1.5e+3', '"a\\u00e9\\n"', '[]', '{}', ' [1, {"a": [true, false, null]}] ']) assert.equal(jsonErrorOffset(ok), -1, ok);
  let compared = 0;
  for (const bad of ['{"id": "p2", \n', '[1, 2', '{"a" 1}', '{"a": 1,}', '[1 2]', '{"a": tru}', '"abc', '{"a": 01}', '[1] x', '{a: 1}']) {
    const at = jsonErrorOffset(bad);
    assert.ok(at >= 0, bad);
    try { JSON.parse(bad); assert.fail(`V8 accepted ${bad}`); } catch (e) {
      const m = /position (\d+)/.exec((e as Error).message);
      if (m) { assert.equal(at, Number(m[1]), bad); compared++; }
    }
  }
  assert.ok(compared >= 3, `only ${compared} comparisons with V8 positions`);
});
