import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { needShared } from './helpers/shared.ts';
import { pseudoword, pseudowordTools } from '../src/prompts/pseudoword.ts';
import { makeRng } from '../src/util/rng.ts';
import type { JsonSchema, ToolSpec } from '../src/data/types.ts';

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

const nested: ToolSpec = {
  type: 'function',
  function: {
    name: 'send_invoice',
    description: 'Send an invoice to a customer by e-mail.',
    parameters: {
      type: 'object',
      $defs: { addr: { type: 'object', properties: { city: { type: 'string', description: 'City name' } }, required: ['city'] } },
      properties: {
        customer: {
          type: 'object',
          description: 'Who pays',
          properties: { name: { type: 'string', description: 'Full name' }, address: { $ref: '#/$defs/addr' } },
          required: ['name'],
        },
        lines: { type: 'array', items: { type: 'object', properties: { sku: { type: 'string' }, qty: { type: 'integer', default: 1 } }, required: ['sku'] } },
        unit: { type: 'string', enum: ['C', 'F'], description: 'Temperature unit' },
        file_path: { anyOf: [{ type: 'string', description: 'The file path' }, { type: 'null' }] },
      },
      required: ['customer', 'lines'],
    },
  },
};
const second: ToolSpec = {
  type: 'function',
  function: { name: 'read_file', description: 'Read a file.', parameters: { type: 'object', properties: { file_path: { type: 'string', description: 'The file path' } }, required: ['file_path'] } },
};

/**
 * Walk original and randomized schemas together: same keys except property names; same types/enums/defaults/$refs;
 * required lists renamed with the same map; descriptions within ±20 % length. Returns the number of renamed keys.
 */
function compareSchemas(a: JsonSchema, b: JsonSchema, where: string): number {
  let renamed = 0;
  const ak = Object.keys(a);
  assert.deepEqual(Object.keys(b), ak, `${where}: same keys`);
  const map = new Map<string, string>();
  if (a.properties && typeof a.properties === 'object') {
    const ap = Object.keys(a.properties);
    const bp = Object.keys(b.properties as object);
    assert.equal(bp.length, ap.length, `${where}: same number of arguments`);
    assert.equal(new Set(bp).size, bp.length, `${where}: argument names unique`);
    ap.forEach((k, i) => {
      map.set(k, bp[i]!);
      assert.notEqual(bp[i], k, `${where}.${k}: renamed`);
      if (IDENT.test(k)) assert.match(bp[i]!, IDENT, `${where}.${k}: identifier`);
      renamed++;
      renamed += compareSchemas((a.properties as Record<string, JsonSchema>)[k]!, (b.properties as Record<string, JsonSchema>)[bp[i]!]!, `${where}.${k}`);
    });
  }
  for (const key of ak) {
    const va = a[key];
    const vb = b[key];
    if (key === 'properties') continue;
    if (key === 'description' || key === 'title') {
      const la = (va as string).length;
      const lb = (vb as string).length;
      assert.ok(lb >= Math.floor(la * 0.8) && lb <= Math.ceil(la * 1.2), `${where}: description length ${la} → ${lb}`);
      assert.notEqual(vb, va);
    } else if (key === 'required') {
      assert.deepEqual(vb, (va as string[]).map((r) => map.get(r)), `${where}: required renamed consistently`);
    } else if (key === 'items' || key === '$defs') {
      if (key === 'items') renamed += compareSchemas(va as JsonSchema, vb as JsonSchema, `${where}[]`);
      else for (const d of Object.keys(va as object)) renamed += compareSchemas((va as Record<string, JsonSchema>)[d]!, (vb as Record<string, JsonSchema>)[d]!, `${where}.$defs.${d}`);
    } else if (key === 'anyOf' || key === 'oneOf' || key === 'allOf') {
      (va as JsonSchema[]).forEach((x, i) => { renamed += compareSchemas(x, (vb as JsonSchema[])[i]!, `${where}.${key}[${i}]`); });
    } else {
      assert.deepEqual(vb, va, `${where}.${key}: kept`);
    }
  }
  return renamed;
}

function words(v: unknown): string[] {
  return (JSON.stringify(v).match(/[A-Za-z]{4,}/g) ?? []).map((w) => w.toLowerCase());
}

/** Tool name, descriptions/titles and argument names of a spec: the fields pseudowords replace. */
function lexicalFields(t: ToolSpec): string[] {
  const out = [t.function.name, t.function.description];
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) {
        if ((k === 'description' || k === 'title') && typeof x === 'string') out.push(x);
        else if (k === 'properties' && x && typeof x === 'object') {
          out.push(...Object.keys(x));
          walk(x);
        } else if (k !== 'enum' && k !== 'default' && k !== 'const') walk(x);
      }
    }
  };
  walk(t.function.parameters);
  return out;
}

function checkTools(orig: ToolSpec[], seed: number): ToolSpec[] {
  const out = pseudowordTools(orig, seed);
  assert.deepEqual(pseudowordTools(structuredClone(orig), seed), out, 'deterministic');
  assert.equal(out.length, orig.length);
  const names = out.map((t) => t.function.name);
  assert.equal(new Set(names).size, names.length, 'tool names unique');
  orig.forEach((t, i) => {
    const o = out[i]!;
    assert.equal(o.type, 'function');
    assert.notEqual(o.function.name, t.function.name);
    if (IDENT.test(t.function.name)) assert.match(o.function.name, IDENT);
    const n = t.function.name.length;
    assert.ok(o.function.name.length >= Math.floor(n * 0.8) && o.function.name.length <= Math.ceil(n * 1.2), `name length ${n} → ${o.function.name.length}`);
    const d = t.function.description.length;
    assert.ok(o.function.description.length >= Math.floor(d * 0.8) && o.function.description.length <= Math.ceil(d * 1.2));
    compareSchemas(t.function.parameters, o.function.parameters, t.function.name);
  });
  // no original word of >= 4 letters survives in the lexical fields (names, descriptions, argument names)
  const lexical = new Set(words(orig.map(lexicalFields)));
  for (const w of words(out.map(lexicalFields))) if (lexical.has(w)) assert.fail(`original word '${w}' survived`);
  return out;
}

test('pseudoword: pronounceable, exact length, seeded', () => {
  const rng = makeRng(7).uniform;
  for (let n = 1; n <= 30; n++) {
    const w = pseudoword(rng, n);
    assert.equal(w.length, n);
    assert.match(w, /^[a-z]+$/);
    if (n >= 2) assert.match(w, /[aeiou]/);
    assert.ok(!/[^aeiou]{3}$/.test(w), `no hard final cluster: ${w}`);
    assert.ok(!/[^aeiou]{4}/.test(w), `pronounceable: ${w}`);
  }
  const a = makeRng(1).uniform;
  const b = makeRng(1).uniform;
  assert.deepEqual([a(), a(), a()], [b(), b(), b()]);
});

test('pseudowordTools: structure, types, enums, defaults, $refs kept; required renamed; consistent cipher; seeds differ', () => {
  const out = checkTools([nested, second], 42);
  // the same argument name gets the same pseudoword in both tools
  const p0 = Object.keys((out[0]!.function.parameters.properties as object));
  const p1 = Object.keys((out[1]!.function.parameters.properties as object));
  assert.equal(p0[3], p1[0]);
  const other = pseudowordTools([nested, second], 43);
  assert.notDeepEqual(other, out);
  assert.equal(JSON.stringify(other).length > 0, true);
});

test('pseudowordTools over real AgentHarm tool sets', (t) => {
  const root = needShared(t, 'data', 'agentharm');
  if (!root) return;
  const ah = JSON.parse(readFileSync(join(root, 'tools.json'), 'utf8')) as { harmful_tools: ToolSpec[]; benign_tools: ToolSpec[] };
  const all = [...ah.harmful_tools, ...ah.benign_tools];
  let checked = 0;
  for (let i = 0; i < all.length; i += 5) {
    checkTools(all.slice(i, i + 5), i);
    checked += Math.min(5, all.length - i);
  }
  t.diagnostic(`${checked} real specs randomized in groups of 5`);
});

test('pseudowordTools over the bundled pair tool sets (nested, enums, defaults)', async () => {
  const { loadPairSet } = await import('../src/data/load.ts');
  const set = await loadPairSet('pairs');
  for (const p of set.pairs) checkTools(p.tools, 11);
});

test('names that differ only in case stay unique', () => {
  const mk = (name: string): ToolSpec => ({ type: 'function', function: { name, description: 'x', parameters: { type: 'object', properties: { Path: { type: 'string' }, path: { type: 'string' } }, required: ['path'] } } });
  const out = pseudowordTools([mk('getUser'), mk('getuser')], 5);
  assert.equal(new Set(out.map((t) => t.function.name)).size, 2);
  for (const t of out) {
    assert.match(t.function.name, IDENT);
    const keys = Object.keys(t.function.parameters.properties as object);
    assert.equal(new Set(keys).size, 2);
    assert.deepEqual(t.function.parameters.required, [keys[1]]);
  }
});
