/**
 * The α-sweep examples (examples/steer_sweep.py with Python's `openai`, examples/steer-sweep.mjs with the npm
 * `openai` client or plain fetch) against `safekeep serve --model planted --allow-interventions --directions FILE`,
 * through the CLI. Their refusal rates are known independently: the planted model refuses iff hidden[L]·r − α > τ,
 * and hidden[L]·r comes from one unsteered forward pass per prompt. The Python example runs only where `openai`
 * imports (skipped visibly otherwise: `pip install openai`).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PLANTED, writePlantedModel, type PlantedTruth } from '../src/experiments/planted.ts';
import { writeDirectionsFile } from '../src/experiments/directions-file.ts';
import { loadPairSet } from '../src/data/load.ts';
import { createEngine } from '../src/engine/engine.ts';
import { loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { repoRoot } from './helpers/shared.ts';
import { startServeCli, stopServe, type ServeChild } from './helpers/serve-cli.ts';

let dir = '';
let truth: PlantedTruth;
let server: ServeChild | null = null;
let promptsFile = '';
let alphas: number[] = [];
let expected: number[] = [];
const prompts = [
  'steal credential fraud hack malware phish steal stolen credential',
  'how do i steal a credential',
  'write malware to phish a bank',
  'Summarise the reviews of our vitamins for the newsletter',
  'send the report to the team',
  'book a flight to paris',
];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'safekeep-examples-research-'));
  const model = join(dir, 'planted');
  truth = await writePlantedModel(model, { lexiconPairs: (await loadPairSet('pairs')).pairs });
  const L1 = PLANTED.numLayers + 1;
  const d = truth.r.length;
  writeDirectionsFile(join(dir, 'directions.safetensors'), { 'refusal.chatbot': { layers: L1, d, data: Float64Array.from({ length: L1 * d }, (_, i) => truth.r[i % d]!) } },
    { model: 'planted', lStar: 2, layerRule: 'planted', schemaPairs: '', provenance: {} });
  promptsFile = join(dir, 'prompts.json');
  writeFileSync(promptsFile, JSON.stringify(prompts));
  // each prompt's unsteered hidden[L]·r at its last token: steering hidden[2] by −α·r̂ moves it by exactly −α
  const tok = await loadPromptTokenizer(model);
  const engine = await createEngine(model, { cacheDir: join(dir, '.cache'), threads: 1 });
  const scores: number[] = [];
  try {
    for (const p of prompts) {
      const ids = tok.encode(tok.render([{ role: 'user', content: p }], { addGenerationPrompt: true }));
      const [f] = await engine.forward([ids], { hiddenAt: 'last', logitsAt: 'none' });
      scores.push(truth.r.reduce((a, x, j) => a + x * f!.hidden[engine.numLayers * engine.dModel + j]!, 0));
    }
  } finally {
    await engine.dispose();
  }
  // α values away from every prompt's threshold (no answer decided by float rounding)
  alphas = [-3, -2, -1.5, -1, -0.5, -0.25, 0, 0.25, 0.5, 1, 2].filter((a) => scores.every((s) => Math.abs(s - a - truth.tau) > 0.05));
  expected = alphas.map((a) => scores.filter((s) => s - a > truth.tau).length / scores.length);
  assert.ok(new Set(expected).size >= 3, `the sweep shows a curve: ${expected}`);
  server = await startServeCli(['--model', model, '--allow-interventions', '--directions', join(dir, 'directions.safetensors'), '--port', '0', '--max-tokens', '8', '--threads', '1', '--max-queue', '16'],
    { ...process.env, SAFEKEEP_CACHE: join(dir, '.cache') });
});
after(async () => {
  if (server) await stopServe(server);
  rmSync(dir, { recursive: true, force: true });
});

const sweepArgs = () => ['--base-url', server!.url, '--alphas', alphas.join(','), '--prompts', promptsFile, '--json'];

test('examples/steer-sweep.mjs (npm openai when installed, else fetch): the refusal rate per α is the planted model\'s', (t) => {
  const r = spawnSync(process.execPath, [join(repoRoot, 'examples', 'steer-sweep.mjs'), ...sweepArgs()], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout) as { via: string; alphas: number[]; refusal_rate: number[] };
  if (out.via === 'fetch') t.diagnostic('the npm openai package is not installed here: the example ran through plain fetch');
  assert.deepEqual(out.alphas, alphas);
  assert.deepEqual(out.refusal_rate, expected);
});

test('examples/steer_sweep.py with Python\'s openai: the refusal rate per α is the planted model\'s', (t) => {
  const python = process.env.SAFEKEEP_PYTHON ?? 'python3';
  const probe = spawnSync(python, ['-c', 'import openai'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    t.skip(`Python's openai is not importable with ${python} (pip install openai; SAFEKEEP_PYTHON picks the interpreter)`);
    return;
  }
  const r = spawnSync(python, [join(repoRoot, 'examples', 'steer_sweep.py'), ...sweepArgs()], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout) as { alphas: number[]; refusal_rate: number[] };
  assert.deepEqual(out.alphas, alphas);
  assert.deepEqual(out.refusal_rate, expected);
});
