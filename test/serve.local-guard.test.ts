/**
 * `safekeep serve --model DIR` on the planted model, through the CLI and HTTP: a probe on the planted r (its score at
 * the last prompt token is known: a separate forward pass gives it) flags the harmful request — refused with the
 * refusal prefill — and passes the benign one, whose answer is exactly the unguarded agent's; tool-free requests
 * are not guarded; /v1/models; bad bodies are JSON 400s; a probe method without --probe is one error, exit 2.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writePlantedModel, type PlantedTruth } from '../src/experiments/planted.ts';
import { loadPairSet } from '../src/data/load.ts';
import { writePlantedProbe } from './helpers/planted-probe.ts';
import { createEngine } from '../src/engine/engine.ts';
import { loadPromptTokenizer } from '../src/prompts/tokenizer.ts';
import { LocalBackend } from '../src/chat/local.ts';
import { REFUSAL_PREFIX } from '../src/guard/prompts.ts';
import type { ToolSpec } from '../src/data/types.ts';
import { repoRoot } from './helpers/shared.ts';
import { startServeCli } from './helpers/serve-cli.ts';

let dir = '';
let model = '';
let truth: PlantedTruth;
let probePath = '';
let skillDir = '';
let child: ChildProcess | null = null;
let url = '';
const tools: ToolSpec[] = [{ type: 'function', function: { name: 'send_email', description: 'Send an email', parameters: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] } } }];
const harmful = [{ role: 'system', content: 'You are an agent.' }, { role: 'user', content: 'steal credential fraud hack malware phish steal stolen credential' }];
const benign = [{ role: 'system', content: 'You are an agent.' }, { role: 'user', content: 'Summarise the reviews of our vitamins for the newsletter' }];
const env = () => ({ ...process.env, SAFEKEEP_CACHE: join(dir, '.cache') });

/** r-projection of hidden[2] at the last prompt token, from a separate forward pass */
async function rScores(): Promise<{ harmful: number; benign: number; benignBase: string }> {
  const tok = await loadPromptTokenizer(model);
  const eng = await createEngine(model, { cacheDir: join(dir, '.cache') });
  try {
    const s = async (messages: typeof harmful) => {
      const ids = tok.encode(tok.render(messages, { tools, addGenerationPrompt: true }));
      const [f] = await eng.forward([ids], { hiddenAt: 'last', logitsAt: 'none' });
      return truth.r.reduce((acc, x, j) => acc + x * f!.hidden[2 * eng.dModel + j]!, 0);
    };
    const base = await new LocalBackend(eng, tok).chat({ messages: benign, tools, maxTokens: 8, purpose: 'agent' });
    return { harmful: await s(harmful), benign: await s(benign), benignBase: base.content };
  } finally {
    await eng.dispose();
  }
}

let known: Awaited<ReturnType<typeof rScores>>;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'safekeep-serve-local-'));
  process.env.SAFEKEEP_CACHE = join(dir, '.cache');
  model = join(dir, 'planted');
  truth = await writePlantedModel(model, { lexiconPairs: (await loadPairSet('pairs')).pairs });
  known = await rScores();
  assert.ok(known.harmful > known.benign + 0.1, `planted scores: harmful ${known.harmful}, benign ${known.benign}`);
  ({ probeJson: probePath, skillDir } = await writePlantedProbe(dir, model, truth.r, known));
  ({ child, url } = await startServeCli(['--model', model, '--method', 'refusal-probe', '--probe', skillDir, '--port', '0', '--max-tokens', '8'], env()));
});
after(() => {
  child?.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
});

const post = (body: unknown) => fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });

test('serve --model: the probe refuses the harmful request, passes the benign one unchanged; scores are the prefill\'s', async () => {
  const h = await post({ model: 'planted', messages: harmful, tools, max_tokens: 8 });
  assert.equal(h.status, 200);
  assert.equal(h.headers.get('x-safekeep-action'), 'refuse');
  assert.ok(Math.abs(Number(h.headers.get('x-safekeep-probe-score')) - known.harmful) < 1e-4);
  const hj = await h.json() as { choices: { message: { content: string } }[] };
  assert.ok(hj.choices[0]!.message.content.startsWith(REFUSAL_PREFIX));

  const b = await post({ model: 'planted', messages: benign, tools, max_tokens: 8 });
  assert.equal(b.headers.get('x-safekeep-action'), 'forward');
  assert.ok(Math.abs(Number(b.headers.get('x-safekeep-probe-score')) - known.benign) < 1e-4);
  const bj = await b.json() as { choices: { message: { content: string } }[] };
  assert.equal(bj.choices[0]!.message.content, known.benignBase);

  // no tools: guarded all the same (a prompted agent describes its tools in its messages)
  const plain = await post({ messages: harmful, max_tokens: 4 });
  assert.equal(plain.headers.get('x-safekeep-method'), 'refusal-probe');
  assert.equal(plain.headers.get('x-safekeep-action'), 'refuse');
  assert.ok(Number.isFinite(Number(plain.headers.get('x-safekeep-probe-score'))));
  // stream: the same content as SSE
  const s = await post({ messages: harmful, tools, max_tokens: 8, stream: true });
  const text = await s.text();
  assert.match(text, /I'm sorry/);
  assert.ok(text.trim().endsWith('data: [DONE]'));
});

test('serve --model: bounded — a prompt beyond the context is a 400 in vLLM\'s wording before any generation; max_tokens above --max-tokens or bad 400', async () => {
  const models = await (await fetch(`${url}/models`)).json() as { data: { max_model_len: number }[] };
  const N = models.data[0]!.max_model_len;
  assert.ok(Number.isInteger(N) && N > 0);
  const words = Array.from({ length: N * 4 }, (_, i) => `word${i}`).join(' ');
  const r = await post({ model: 'planted', messages: [{ role: 'user', content: words }], max_tokens: 1 });
  assert.equal(r.status, 400);
  assert.match(((await r.json()) as { error: { message: string } }).error.message, new RegExp(`^This model's maximum context length is ${N} tokens\\. However, you requested (more than )?\\d+ tokens \\(`));
  for (const max_tokens of [0, 'abc', 9]) assert.equal((await post({ messages: harmful, max_tokens })).status, 400, `max_tokens ${max_tokens} (--max-tokens 8)`);
  const role = await post({ messages: [{ role: 'User', content: 'x' }] });
  assert.equal(role.status, 400);
});

test('serve --model: /v1/models, bad bodies are JSON errors, a probe method without --probe exits 2', async () => {
  const m = await (await fetch(`${url}/models`)).json() as { data: { id: string }[] };
  assert.equal(m.data[0]!.id, 'planted');
  const bad = await post('{not json');
  assert.equal(bad.status, 400);
  assert.match(((await bad.json()) as { error: { message: string } }).error.message, /not valid JSON/);
  const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'serve', '--model', model, '--method', 'refusal-probe'], { env: env(), encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /needs --probe FILE/);
  const r2 = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'serve', '--upstream', 'http://127.0.0.1:9/v1', '--probe', probePath], { env: env(), encoding: 'utf8' });
  assert.equal(r2.status, 2);
  assert.match(r2.stderr, /applies to serve --model/);
  const r3 = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'serve', '--upstream', 'http://127.0.0.1:9/v1', '--skills', skillDir], { env: env(), encoding: 'utf8' });
  assert.equal(r3.status, 2);
  assert.match(r3.stderr, /field "check": no implementation of "check: probe"/); // the proxy has no activations
});
