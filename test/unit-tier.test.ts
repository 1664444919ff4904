/**
 * `npm run test:unit` (the fast tier: pure functions, oracles on the smallest checkpoints; docs/testing.md) names its
 * files in package.json: every name or glob there must match a test file, so a renamed file cannot drop out of the
 * tier unnoticed, and the tier must stay a strict subset of the full `npm test`.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../src/data/locate.ts';

test('test:unit: every file pattern matches a test file; the tier is a subset of npm test', () => {
  const scripts = (JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const unit = scripts['test:unit']!;
  assert.match(scripts.test!, /test\/\*\.test\.ts/);
  const patterns = unit.split(/\s+/).filter((w) => w.startsWith('test/'));
  assert.ok(patterns.length >= 10);
  const files = readdirSync(join(repoRoot, 'test')).filter((f) => f.endsWith('.test.ts'));
  const matched = new Set<string>();
  for (const p of patterns) {
    assert.match(p, /^test\/[^/]+\.test\.ts$/, p);
    const re = new RegExp(`^${p.slice('test/'.length).replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`);
    const hits = files.filter((f) => re.test(f));
    assert.ok(hits.length > 0, `${p} matches no test file`);
    for (const h of hits) matched.add(h);
  }
  assert.ok(matched.size < files.length, 'the fast tier runs fewer files than npm test');
});
