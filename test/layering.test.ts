/**
 * Imports point one way (developers' brief): no import cycle anywhere under src/, nothing under src/engine imports
 * from src/cli, the engine's layers only import downwards (graph ← runtime ← run ← engine.ts), src/guard imports
 * nothing from src/experiments and src/report nothing from src/guard. Type imports
 * count too: a cycle through types is still a cycle for the reader.
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
  assert.ok(graph.get('guard/eval.ts')?.includes('outcome/classify.ts'));
  assert.ok(graph.get('guard/probe.ts')?.includes('data/probe-file.ts'));
});

test('no two top-level folders of src/ import each other (imports point one way, down the pipeline)', () => {
  const top = (f: string) => (f.includes('/') ? f.slice(0, f.indexOf('/')) : '.');
  const edges = new Set<string>();
  for (const [f, deps] of graph) for (const d of deps) if (top(f) !== top(d)) edges.add(`${top(f)} -> ${top(d)}`);
  const ties = [...edges].filter((e) => { const [a, b] = e.split(' -> '); return a! < b! && edges.has(`${b} -> ${a}`); }).map((e) => e.replace('->', '<->'));
  assert.deepEqual(ties, [], `folders import each other: ${ties.join('; ')}`);
  // the scan sees cross-folder edges (the harness's chat records read the chat types below it)
  assert.ok(edges.has('eval -> chat') && edges.has('cli -> eval'));
});

test('configuration is read at the CLI edge: no process.env under src/ outside src/cli/', () => {
  const readers = files(src).map((f) => relative(src, f)).filter((f) => !f.startsWith('cli/')
    && /process\.env\b/.test(readFileSync(join(src, f), 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '')));
  assert.deepEqual(readers, [], `these read the environment themselves: ${readers.join(', ')}`);
  // the scan sees a read where there is one
  assert.ok(/process\.env\b/.test(readFileSync(join(src, 'cli', 'env.ts'), 'utf8')));
});
