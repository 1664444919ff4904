/**
 * The whole pipeline (render with the real chat template → extract → analyses → report → steering sweep) on a tiny
 * random checkpoint of every family with a real tokenizer. Random weights mean no expected AUROC; what is checked
 * is that every stage runs on every family's real template and that the outputs have the right shapes and ranges.
 * Templates from ../shared/templates (Llama-3.1, Qwen2.5, Mistral v0.3); Qwen3's ships with its npm tokenizer.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import type { Family } from '../src/checkpoint/types.ts';
import { installTokenizer, npmTokenizerDir, type NpmTokenizer } from '../src/prompts/tokenizer.ts';
import { reproduce } from '../src/experiments/reproduce.ts';
import { steerSweep } from '../src/experiments/steer/sweep.ts';
import { sharedPath } from './helpers/shared.ts';

const CASES: { family: Family; tokenizer: NpmTokenizer; template: string | null }[] = [
  { family: 'llama', tokenizer: 'llama3', template: 'llama-3.1-instruct.jinja' },
  { family: 'qwen3', tokenizer: 'qwen3', template: null },
  { family: 'qwen2', tokenizer: 'qwen3', template: 'qwen2.5-instruct.jinja' },
  { family: 'mistral', tokenizer: 'llama3', template: 'mistral-7b-instruct-v0.3.hf.jinja' },
];

function vocabSize(which: NpmTokenizer): number {
  const tok = JSON.parse(readFileSync(join(npmTokenizerDir(which), 'tokenizer.json'), 'utf8')) as {
    model: { vocab: Record<string, number> }; added_tokens: { id: number }[];
  };
  let max = 0;
  for (const id of Object.values(tok.model.vocab)) if (id > max) max = id;
  for (const t of tok.added_tokens) if (t.id > max) max = t.id;
  return max + 1;
}

for (const c of CASES) {
  test(`pipeline on a tiny random ${c.family} checkpoint with its real template`, async (t) => {
    let template: string | undefined;
    if (c.template) {
      const p = sharedPath('templates', c.template);
      if (!p) return t.skip(`needs ../shared/templates/${c.template} (set SAFEKEEP_SHARED); not present here`);
      template = readFileSync(p, 'utf8');
    }
    const dir = mkdtempSync(join(tmpdir(), `pipe-${c.family}-`));
    process.env.SAFEKEEP_CACHE = join(dir, '.graphs');
    process.env.SAFEKEEP_QUIET = '1';
    try {
      const model = join(dir, `tiny-${c.family}`);
      await writeRandomCheckpoint(model, c.family, { vocabSize: vocabSize(c.tokenizer), numLayers: 3, seed: 7 });
      await installTokenizer(model, c.tokenizer, template !== undefined ? { template } : {});
      const { results: res, files } = await reproduce({ model, data: 'pairs', results: join(dir, 'results'), limit: 12, reps: 50, engine: { cacheDir: join(dir, '.graphs'), quiet: true } });
      assert.equal(res.layers, 4);
      assert.ok(res.lStar.layer >= 1 && res.lStar.layer <= 3);
      for (const row of [...res.table1, ...res.table2]) {
        assert.ok(row.cross.auroc >= 0 && row.cross.auroc <= 1 && row.cross.lo <= row.cross.hi, `${row.config}: ${JSON.stringify(row.cross)}`);
        assert.ok(row.cross.n > 0);
      }
      assert.equal(res.firstToken?.length, 4);
      assert.ok(existsSync(files.html));
      const manifest = JSON.parse(readFileSync(join(dir, 'results', `tiny-${c.family}`, 'manifest.json'), 'utf8')) as { prompts: { templateHash: string } };
      assert.match(manifest.prompts.templateHash, /^[0-9a-f]{64}$/);
      const s = await steerSweep({
        model, data: 'pairs', results: join(dir, 'results'), limit: 12, alphas: [{ kind: 'absolute', value: 0 }, { kind: 'relative', value: 0.5 }],
        layer: 'auto', direction: 'schema-harmful', maxNewTokens: 6, requests: ['harmful'], engine: { cacheDir: join(dir, '.graphs'), quiet: true },
      });
      const rows = s.sweeps[0]!.rows;
      assert.equal(rows.length, 2);
      for (const r of rows) assert.equal(r.counts.refusal + r.counts.valid + r.counts.invalid, r.n);
      assert.ok(Math.abs(rows[1]!.alphaRelative! - 0.5) < 1e-6);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
