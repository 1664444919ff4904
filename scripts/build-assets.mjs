#!/usr/bin/env node
// The package build's file steps around `tsc -p tsconfig.build.json`: `clean` empties dist/ (no stale modules ship),
// `copy` puts the non-TypeScript files under src/ that the code reads at run time (e.g. experiments/planted-words.txt,
// read next to its module) at the same place under dist/.
import { cpSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'src');
const dist = join(root, 'dist');
const step = process.argv[2];
if (step === 'clean') rmSync(dist, { recursive: true, force: true });
else if (step === 'copy') {
  const walk = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]));
  for (const f of walk(src).filter((f) => !f.endsWith('.ts') && !f.endsWith('.md'))) {
    const to = join(dist, relative(src, f));
    mkdirSync(dirname(to), { recursive: true });
    cpSync(f, to);
  }
} else {
  console.error('usage: build-assets.mjs clean|copy');
  process.exitCode = 2;
}
