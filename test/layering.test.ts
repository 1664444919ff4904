/**
 * Imports point one way (developers' brief): no import cycle anywhere under src/; no two folders import each other at
 * any level (a folder's units are its subfolders and the files directly in it); the guards' roles in their order
 * (http ← chat ← harness ← guard ← s3 ← benchmarks ← eval ← serve ← cli); nothing under src/engine imports from
 * src/cli and the engine's layers only import downwards (graph ← runtime ← run ← engine.ts); src/guard imports nothing
 * from src/experiments and src/report nothing from src/guard. Type imports count too: a cycle through types is still
 * a cycle for the reader.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../src/data/locate.ts';

const src = join(repoRoot, 'src');
const files = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []);

/** file (relative to src/) → the src files it imports */
const graph = new Map<string, string[]>();
for (const f of files(src)) {
  const deps: string[] = [];
  for (const m of readFileSync(f, 'utf8').matchAll(/(?:from\s+|import\s*\(\s*)['"](\.[^'"]+)['"]/g)) {
    const target = normalize(join(dirname(f), m[1]!));
    if (existsSync(target)) deps.push(relative(src, target));
  }
  graph.set(relative(src, f), deps);
}

test('the import graph: a few known edges are seen (the scan works)', () => {
  assert.ok(graph.get('engine/engine.ts')?.includes('engine/run/forward.ts'));
  assert.ok(graph.get('cli/engine-flags.ts')?.includes('engine/engine.ts'));
});

test('no import cycle under src/', () => {
  const state = new Map<string, 1 | 2>();
  const stack: string[] = [];
  const visit = (u: string): string[] | null => {
    state.set(u, 1);
    stack.push(u);
    for (const v of graph.get(u) ?? []) {
      if (state.get(v) === 1) return [...stack.slice(stack.indexOf(v)), v];
      if (!state.has(v)) { const c = visit(v); if (c) return c; }
    }
    stack.pop();
    state.set(u, 2);
    return null;
  };
  for (const f of graph.keys()) {
    if (state.has(f)) continue;
    const cycle = visit(f);
    assert.equal(cycle, null, `import cycle: ${cycle?.join(' → ')}`);
  }
});

test('engine layers import only downwards, and never from the CLI', () => {
  const rank = (f: string): number | null => f.startsWith('engine/graph/') ? 0 : f.startsWith('engine/runtime/') ? 1
    : f.startsWith('engine/run/') ? 2 : f === 'engine/engine.ts' ? 3 : null;
  for (const [f, deps] of graph) {
    if (!f.startsWith('engine/')) continue;
    for (const d of deps) {
      assert.ok(!d.startsWith('cli/'), `${f} imports ${d}`);
      const [a, b] = [rank(f), rank(d)];
      if (a !== null && b !== null) assert.ok(b <= a, `${f} (layer ${a}) imports ${d} (layer ${b}), an upper layer`);
    }
  }
});

test('inside src/engine, subfolders never import the files directly in src/engine', () => {
  // those files (engine.ts, engine-config.ts, types.ts, reference.ts) sit above the layers and import them; what the
  // layers need of them lives below (graph/config.ts, run/types.ts), so no file and subfolder import each other
  const top = (f: string) => !f.slice('engine/'.length).includes('/');
  for (const [f, deps] of graph) {
    if (!f.startsWith('engine/') || top(f)) continue;
    for (const d of deps) assert.ok(!(d.startsWith('engine/') && top(d)), `${f} imports ${d}`);
  }
  // the scan sees the edges that replaced the old ones
  assert.ok(graph.get('engine/runtime/session.ts')?.includes('engine/graph/config.ts'));
  assert.ok(graph.get('engine/types.ts')?.includes('engine/run/types.ts'));
});

test('folders by role: src/guard imports nothing from src/experiments, src/report nothing from src/guard', () => {
  // what both need (the output classification, the probe file format) lives below them: src/outcome/, src/data/
  for (const [f, deps] of graph) {
    if (f.startsWith('guard/')) for (const d of deps) assert.ok(!d.startsWith('experiments/'), `${f} imports ${d}`);
    if (f.startsWith('report/')) for (const d of deps) assert.ok(!d.startsWith('guard/'), `${f} imports ${d}`);
  }
  // the scan sees the edges that replaced the old ones
  assert.ok(graph.get('eval/table4/eval.ts')?.includes('outcome/classify.ts'));
  assert.ok(graph.get('guard/probe.ts')?.includes('data/probe-file.ts'));
});

/**
 * The units of a folder: each subfolder, and each file directly in it. Two units of one folder that import each other
 * (through any file below them) are a tie; at the top level a file directly in src/ is a unit too.
 */
function ties(): string[] {
  const edges = new Set<string>();
  for (const [f, deps] of graph) for (const d of deps) {
    const a = f.split('/'), b = d.split('/');
    let i = 0;
    while (i < a.length - 1 && i < b.length - 1 && a[i] === b[i]) i++;
    if (a[i] === b[i]) continue;
    edges.add(`${a.slice(0, i).join('/') || 'src'}: ${a[i]} -> ${b[i]}`);
  }
  return [...edges].filter((e) => {
    const [dir, pair] = e.split(': ');
    const [x, y] = pair!.split(' -> ');
    return x! < y! && edges.has(`${dir}: ${y} -> ${x}`);
  }).map((e) => e.replace('->', '<->'));
}

test('no two folders import each other, at any level (imports point one way, down the pipeline)', () => {
  const found = ties();
  assert.deepEqual(found, [], `units that import each other: ${found.join('; ')}`);
  // the scan sees cross-folder edges at both levels (the harness's records read the chat types below it; inside
  // src/engine the run layer reads the graph's hook table)
  const seen = new Set<string>();
  for (const [f, deps] of graph) for (const d of deps) seen.add(`${f.split('/')[0]} -> ${d.split('/')[0]}`);
  assert.ok(seen.has('harness -> chat') && seen.has('cli -> harness') && seen.has('serve -> guard'));
  assert.ok([...graph].some(([f, deps]) => f.startsWith('engine/run/') && deps.some((d) => d.startsWith('engine/graph/'))));
});

test('the roles in order: the HTTP core, chat, harness and benchmarks know no guard, S³, evaluation or server', () => {
  const below: Record<string, readonly string[]> = {
    http: ['chat', 'guard', 's3', 'serve', 'eval', 'harness', 'benchmarks', 'cli'],
    chat: ['guard', 's3', 'serve', 'eval', 'harness', 'benchmarks', 'cli'],
    harness: ['guard', 's3', 'serve', 'eval', 'benchmarks', 'experiments', 'cli'],
    guard: ['s3', 'serve', 'eval', 'benchmarks', 'experiments', 'cli'],
    s3: ['serve', 'eval', 'benchmarks', 'experiments', 'cli'],
    benchmarks: ['s3', 'serve', 'eval', 'experiments', 'cli'],
    eval: ['serve', 'experiments', 'cli'],
  };
  for (const [f, deps] of graph) {
    const forbidden = below[f.split('/')[0]!];
    if (!forbidden) continue;
    for (const d of deps) assert.ok(!forbidden.includes(d.split('/')[0]!), `${f} imports ${d}`);
  }
});

test('configuration is read at the CLI edge: no process.env under src/ outside src/cli/', () => {
  const readers = files(src).map((f) => relative(src, f)).filter((f) => !f.startsWith('cli/')
    && /process\.env\b/.test(readFileSync(join(src, f), 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '')));
  assert.deepEqual(readers, [], `these read the environment themselves: ${readers.join(', ')}`);
  // the scan sees a read where there is one
  assert.ok(/process\.env\b/.test(readFileSync(join(src, 'cli', 'env.ts'), 'utf8')));
});
