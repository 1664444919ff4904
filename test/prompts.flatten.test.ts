import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { needShared } from './helpers/shared.ts';
import { flattenToolSpec, flattenTools } from '../src/prompts/flatten.ts';
import type { JsonSchema, ToolSpec } from '../src/data/types.ts';

function tool(name: string, description: string, parameters: JsonSchema): ToolSpec {
  return { type: 'function', function: { name, description, parameters } };
}

test('paper seed example: run_command(command, timeout) / description / one line per argument', () => {
  const t = tool('run_command', 'Run a shell command and return its output.', {
    type: 'object',
    properties: {
      command: { type: 'string', description: 'The command line to run' },
      timeout: { type: 'integer', description: 'Seconds to wait before giving up.', default: 30 },
    },
    required: ['command'],
  });
  assert.equal(
    flattenToolSpec(t),
    'run_command(command, timeout)\nRun a shell command and return its output.\n- command: The command line to run.\n- timeout: Seconds to wait before giving up. Default: 30.',
  );
});

test('nested objects → dotted names; enums and defaults as prose; arrays of objects', () => {
  const t = tool('send_invoice', 'Send an invoice.', {
    type: 'object',
    properties: {
      customer: {
        type: 'object',
        description: 'Who pays',
        properties: {
          name: { type: 'string', description: 'Full name' },
          address: { type: 'object', properties: { city: { type: 'string' }, country: { type: 'string', enum: ['FR', 'DE'] } } },
        },
        required: ['name'],
      },
      lines: {
        type: 'array',
        description: 'Invoice lines',
        items: { type: 'object', properties: { sku: { type: 'string', description: 'Article code' }, qty: { type: 'integer', default: 1 } } },
      },
      unit: { type: 'string', enum: ['C', 'F'], description: 'Temperature unit' },
      tags: { type: 'array', items: { type: 'string', enum: ['urgent', 'normal'] } },
    },
    required: ['customer', 'lines'],
  });
  assert.equal(
    flattenToolSpec(t),
    [
      'send_invoice(customer, lines, unit, tags)',
      'Send an invoice.',
      '- customer: Who pays.',
      '- customer.name: Full name.',
      '- customer.address',
      '- customer.address.city',
      '- customer.address.country: One of: FR, DE.',
      '- lines: Invoice lines.',
      '- lines.sku: Article code.',
      '- lines.qty: Default: 1.',
      '- unit: Temperature unit. One of: C, F.',
      '- tags: One of: urgent, normal.',
    ].join('\n'),
  );
});

test('$ref into $defs/definitions (recursive stops), anyOf/oneOf/allOf merged, const, missing descriptions, braces', () => {
  const t = tool('tree_op', 'Operate on a {tree}.', {
    type: 'object',
    $defs: { node: { type: 'object', description: 'A node', properties: { label: { type: 'string' }, child: { $ref: '#/$defs/node' } } } },
    definitions: { mode: { type: 'string', enum: ['fast', 'safe'], description: 'How to run' } },
    properties: {
      root: { $ref: '#/$defs/node' },
      mode: { $ref: '#/definitions/mode' },
      target: { anyOf: [{ type: 'string', description: 'A path' }, { type: 'null' }] },
      shape: { oneOf: [{ type: 'object', properties: { radius: { type: 'number' } } }, { type: 'object', properties: { side: { type: 'number' } } }] },
      opts: { allOf: [{ properties: { a: { type: 'string' } } }, { properties: { b: { const: 'x' } } }] },
      bad: { $ref: '#/$defs/missing' },
    },
  });
  const out = flattenToolSpec(t);
  assert.equal(
    out,
    [
      'tree_op(root, mode, target, shape, opts, bad)',
      'Operate on a (tree).',
      '- root: A node.',
      '- root.label',
      '- root.child',
      '- mode: How to run. One of: fast, safe.',
      '- target: A path.',
      '- shape',
      '- shape.radius',
      '- shape.side',
      '- opts',
      '- opts.a',
      '- opts.b: One of: x.',
      '- bad',
    ].join('\n'),
  );
  assert.equal(flattenToolSpec(tool('noop', '', {})), 'noop()');
  assert.equal(flattenToolSpec(tool('noop', 'Nothing.', { type: 'object', properties: {} })), 'noop()\nNothing.');
  assert.equal(flattenTools([tool('a', 'A.', {}), tool('b', 'B.', {})]), 'a()\nA.\n\nb()\nB.');
});

/** Every argument path of a schema, walked independently of the implementation (plain objects/arrays only). */
function argumentPaths(s: JsonSchema, prefix: string, out: string[]): void {
  const props = s.properties as Record<string, JsonSchema> | undefined;
  for (const [k, v] of Object.entries(props ?? {})) {
    const p = prefix ? `${prefix}.${k}` : k;
    out.push(p);
    argumentPaths(v, p, out);
    const items = v.items as JsonSchema | undefined;
    if (items && typeof items === 'object') argumentPaths(items, p, out);
  }
}

function descriptionsOf(v: unknown, out: string[]): void {
  if (Array.isArray(v)) v.forEach((x) => descriptionsOf(x, out));
  else if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      if (k === 'description' && typeof x === 'string') out.push(x);
      else descriptionsOf(x, out);
    }
  }
}

function count(hay: string, needle: RegExp): number {
  return (hay.match(needle) ?? []).length;
}

function realSpecs(root: string): ToolSpec[] {
  const ah = JSON.parse(readFileSync(join(root, 'agentharm', 'tools.json'), 'utf8')) as { harmful_tools: ToolSpec[]; benign_tools: ToolSpec[] };
  const specs: ToolSpec[] = [...ah.harmful_tools, ...ah.benign_tools];
  const seen = new Set<string>();
  for (const f of ['data_JA.json', 'data_MQ.json']) {
    const rows = JSON.parse(readFileSync(join(root, 'toolsword', f), 'utf8')) as Array<{ tools: Array<{ name: string; description: string; parameters: JsonSchema }> }>;
    for (const r of rows) {
      for (const t of r.tools) {
        const key = JSON.stringify(t);
        if (seen.has(key)) continue;
        seen.add(key);
        specs.push({ type: 'function', function: t });
      }
    }
  }
  return specs;
}

test('properties over the real AgentHarm + ToolSword specs (>= 30)', (t) => {
  const root = needShared(t, 'data');
  if (!root) return;
  const specs = realSpecs(root);
  assert.ok(specs.length >= 30, `only ${specs.length} specs`);
  let nested = 0;
  for (const spec of specs) {
    const out = flattenToolSpec(spec);
    const where = spec.function.name;
    assert.equal(out, flattenToolSpec(structuredClone(spec)), `${where}: deterministic`);
    assert.ok(!/[{}]/.test(out), `${where}: no braces`);
    assert.ok(!out.includes('"type"') && !/\btype\s*:/.test(out), `${where}: no type declarations`);
    assert.ok(!out.includes('"properties"') && !out.includes('"required"'), `${where}: no schema keys`);
    const descs: string[] = [];
    descriptionsOf(spec.function, descs);
    const srcText = descs.join('\n');
    assert.ok(count(out, /required/gi) <= count(srcText, /required/gi), `${where}: no required markers`);
    const top = Object.keys((spec.function.parameters.properties as object | undefined) ?? {});
    const lines = out.split('\n');
    assert.equal(lines[0], `${where}(${top.join(', ')})`, `${where}: signature`);
    const paths: string[] = [];
    argumentPaths(spec.function.parameters, '', paths);
    if (paths.some((p) => p.includes('.'))) nested++;
    const argLines = lines.filter((l) => l.startsWith('- ')).map((l) => l.slice(2).split(':')[0]);
    assert.deepEqual(argLines, paths, `${where}: every argument path named once, in order`);
    // what the tool does and what each argument means survive (whitespace-normalised)
    const flat = out.replace(/\s+/g, ' ');
    for (const d of descs) assert.ok(flat.includes(d.replace(/[{]/g, '(').replace(/[}]/g, ')').replace(/\s+/g, ' ').trim().replace(/[.]$/, '')), `${where}: keeps "${d.slice(0, 40)}"`);
  }
  t.diagnostic(`${specs.length} real specs flattened (${nested} with nested arguments)`);
});

test('properties over the bundled pair tools (nested objects, arrays, enums, defaults)', async (t) => {
  const { loadPairSet } = await import('../src/data/load.ts');
  const set = await loadPairSet('pairs');
  const seen = new Map<string, ToolSpec>();
  for (const p of set.pairs) for (const tool of p.tools) seen.set(JSON.stringify(tool), tool);
  let nested = 0;
  let enums = 0;
  for (const spec of seen.values()) {
    const out = flattenToolSpec(spec);
    const where = spec.function.name;
    assert.ok(!/[{}]/.test(out) && !out.includes('"type"') && !/\btype\s*:/.test(out), `${where}: no JSON/type syntax`);
    const paths: string[] = [];
    argumentPaths(spec.function.parameters, '', paths);
    if (paths.some((p) => p.includes('.'))) nested++;
    const argLines = out.split('\n').filter((l) => l.startsWith('- ')).map((l) => l.slice(2).split(':')[0]);
    assert.deepEqual(argLines, paths, `${where}: every argument path named once, in order`);
    const enumValues = (JSON.stringify(spec.function.parameters).match(/"enum":\[([^\]]*)\]/g) ?? []).flatMap((m) => JSON.parse(m.slice(7)) as unknown[]);
    if (enumValues.length) enums++;
    for (const v of enumValues) assert.ok(out.includes(String(v)), `${where}: enum value ${String(v)} kept`);
  }
  assert.ok(nested > 0 && enums > 0);
  t.diagnostic(`${seen.size} distinct bundled tool specs (${nested} nested, ${enums} with enums)`);
});
