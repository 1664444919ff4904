/**
 * `npm run bench:serve -- --sweep [--model planted|small] [--alphas 0,0.5,…] [--prompts 16] [--max-tokens 12]
 *    [--rounds 1] [--threads 1] [--json FILE]`: an α sweep over the OpenAI API of `safekeep serve --model
 * --allow-interventions`, on the planted model (tiny: a step is mostly fixed per-step cost; its refusal curve is
 * known) or `small` (a random 4-layer d-256 model with the Llama-3 vocabulary: steps that read weights, as real
 * models' decode steps do), with the direction given to the server by `--directions` and named in each request
 * (`"direction": "refusal.chatbot"` at layer 2).
 * Two ways of running the same 8 α × 16 prompts, in the same server process, alternating per round:
 * - in turn: one client sends every request one after the other (α by α, prompt by prompt);
 * - 8 clients: client k sends α_k's 16 requests one after the other, the 8 clients at once, so requests with
 *   different steering decode in the same steps (per-row sets).
 * Prints completion tokens/s of each, their ratio (target ≥ 3×), whether every (α, prompt) answer is the same both
 * ways, and the refusal rate per α (planted model: answers starting "sorry").
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { Agent, request } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PLANTED, writePlantedModel } from '../src/experiments/planted.ts';
import { writeDirectionsFile } from '../src/experiments/directions-file.ts';
import { loadPairSet } from '../src/data/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { installTokenizer } from '../src/prompts/tokenizer.ts';
import { makeRng } from '../src/util/rng.ts';
import { finishBench, flag, loadavg } from './common.ts';

/** `--model small`: 4 layers of d 256 under the Llama-3 vocabulary (its lm_head, 128,256 × 256, is most of a step) */
const SMALL_SHAPE = { numLayers: 4, hiddenSize: 256, numHeads: 8, numKvHeads: 4, headDim: 32, intermediateSize: 768, vocabSize: 128256, tieWordEmbeddings: false, ropeScaling: null, ropeTheta: 500000, seed: 3 } as const;

const repo = resolve(fileURLToPath(import.meta.url), '..', '..');

function startServer(args: string[], env: NodeJS.ProcessEnv): Promise<{ proc: ChildProcess; url: string }> {
  const proc = spawn(process.execPath, [join(repo, 'bin', 'safekeep.mjs'), 'serve', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => { err = (err + d.toString()).slice(-4000); });
  return new Promise((ok, fail) => {
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /(http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(out);
      if (m) ok({ proc, url: m[1]! });
    });
    proc.on('exit', (code) => fail(new Error(`server exited (${code}) before listening: ${err}`)));
  });
}

interface Answer { content: string; tokens: number }

/**
 * The clients: node:http over kept-alive connections rather than fetch, whose per-request cost on this client's one
 * thread (~1 ms) would otherwise be a large part of a tiny model's request and hide the server's batching.
 */
const agent = new Agent({ keepAlive: true, maxSockets: 64 });

function ask(url: string, prompt: string, alpha: number, maxTokens: number): Promise<Answer> {
  const body = JSON.stringify({ model: 'planted', messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens, safekeep: { steer: { layer: 2, direction: 'refusal.chatbot', alpha } } });
  return new Promise((ok, fail) => {
    const req = request(`${url}/chat/completions`, { method: 'POST', agent, timeout: 120_000, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('end', () => {
        try {
          const j = JSON.parse(Buffer.concat(parts).toString('utf8')) as { choices?: { message: { content: string } }[]; usage?: { completion_tokens: number }; error?: { message: string } };
          if (res.statusCode !== 200) throw new Error(`${res.statusCode} ${j.error?.message}`);
          ok({ content: j.choices![0]!.message.content, tokens: j.usage!.completion_tokens });
        } catch (e) {
          fail(e);
        }
      });
      res.on('error', fail);
    });
    req.on('timeout', () => req.destroy(new Error('request timed out')));
    req.on('error', fail);
    req.end(body);
  });
}

export async function sweep(): Promise<void> {
  const alphas = (flag('alphas') ?? '-3,-2,-1,-0.5,-0.25,0,0.25,0.5').split(',').map(Number);
  const nPrompts = Number(flag('prompts') ?? 16);
  const maxTokens = Number(flag('max-tokens') ?? 12);
  const rounds = Number(flag('rounds') ?? 1);
  const threads = Number(flag('threads') ?? 1);
  const kind = flag('model') ?? 'planted';
  if (kind !== 'planted' && kind !== 'small') throw new Error(`--model planted|small, got ${kind}`);
  const dir = mkdtempSync(join(tmpdir(), 'safekeep-bench-sweep-'));
  let proc: ChildProcess | null = null;
  try {
    const pairs = (await loadPairSet('pairs')).pairs;
    const model = join(dir, kind);
    let r: number[];
    let L1: number;
    if (kind === 'planted') {
      r = (await writePlantedModel(model, { lexiconPairs: pairs })).r;
      L1 = PLANTED.numLayers + 1;
    } else {
      // a random Llama-shaped model with the Llama-3 tokenizer: decode steps that read real weights (its answers run
      // to max_tokens: random weights never end a turn), a seeded random direction
      await writeRandomCheckpoint(model, 'llama', SMALL_SHAPE);
      await installTokenizer(model, 'llama3');
      const rng = makeRng(11);
      r = Array.from({ length: SMALL_SHAPE.hiddenSize }, () => rng.normal());
      L1 = SMALL_SHAPE.numLayers + 1;
    }
    // one row per hidden state (L + 1), each r: the direction is read at whatever layer a request names
    const directions = join(dir, 'directions.safetensors');
    writeDirectionsFile(directions, { 'refusal.chatbot': { layers: L1, d: r.length, data: Float64Array.from({ length: L1 * r.length }, (_, i) => r[i % r.length]!) } },
      { model: kind, lStar: 2, layerRule: 'bench', schemaPairs: '', provenance: {} });
    // half harmful, half benign requests of the bundled pairs
    const prompts = Array.from({ length: nPrompts }, (_, i) => (i % 2 === 0 ? pairs[i >> 1]!.harmful.prompt : pairs[i >> 1]!.benign.prompt));
    const s = await startServer(['--model', model, '--allow-interventions', '--directions', directions, '--port', '0', '--threads', String(threads), '--max-tokens', String(maxTokens), '--max-queue', String(2 * alphas.length)],
      { ...process.env, SAFEKEEP_CACHE: join(dir, 'cache'), SAFEKEEP_QUIET: '1' });
    proc = s.proc;
    await ask(s.url, prompts[0]!, 0, maxTokens); // warm-up: graph load
    const inTurn = async () => {
      const out: Answer[][] = alphas.map(() => []);
      for (const [k, a] of alphas.entries()) for (const p of prompts) out[k]!.push(await ask(s.url, p, a, maxTokens));
      return out;
    };
    const together = async () => Promise.all(alphas.map(async (a) => { const o: Answer[] = []; for (const p of prompts) o.push(await ask(s.url, p, a, maxTokens)); return o; }));
    const timed = async (f: () => Promise<Answer[][]>) => {
      const t0 = performance.now();
      const answers = await f();
      const wallS = (performance.now() - t0) / 1000;
      const tokens = answers.flat().reduce((x, y) => x + y.tokens, 0);
      return { answers, wallS, tokens, tokensPerS: tokens / wallS, load: loadavg() };
    };
    let bestTurn: Awaited<ReturnType<typeof timed>> | null = null;
    let bestTogether: Awaited<ReturnType<typeof timed>> | null = null;
    const loads: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? [inTurn, together] : [together, inTurn];
      for (const f of order) {
        const m = await timed(f);
        loads.push(m.load);
        process.stderr.write(`  round ${r + 1}, ${f === inTurn ? 'one client in turn' : `${alphas.length} clients`}: ${m.tokensPerS.toFixed(1)} tok/s (${m.tokens} tokens, ${m.wallS.toFixed(2)} s)\n`);
        if (f === inTurn) { if (!bestTurn || m.tokensPerS > bestTurn.tokensPerS) bestTurn = m; } else if (!bestTogether || m.tokensPerS > bestTogether.tokensPerS) bestTogether = m;
      }
    }
    const same = bestTurn!.answers.every((row, k) => row.every((a, i) => a.content === bestTogether!.answers[k]![i]!.content));
    const ratio = bestTogether!.tokensPerS / bestTurn!.tokensPerS;
    const out = [
      `bench:serve --sweep — safekeep serve --model ${kind === 'planted' ? 'planted' : 'small (random, 4 × d 256, Llama-3 vocabulary)'} --allow-interventions --directions (refusal.chatbot at layer 2), ${threads} thread(s); ${alphas.length} α × ${prompts.length} prompts (half harmful, half benign), max_tokens ${maxTokens}; best of ${rounds} round(s), same server`,
      '',
      '| way | completion tokens/s | tokens | wall s |', '| --- | --- | --- | --- |',
      `| one client, the sweep in turn | ${bestTurn!.tokensPerS.toFixed(1)} | ${bestTurn!.tokens} | ${bestTurn!.wallS.toFixed(2)} |`,
      `| ${alphas.length} clients, one α each | ${bestTogether!.tokensPerS.toFixed(1)} | ${bestTogether!.tokens} | ${bestTogether!.wallS.toFixed(2)} |`,
      '',
      `sweep ratio: ${ratio.toFixed(2)}× tokens/s (target ≥ 3×: ${ratio >= 3 ? 'met' : 'NOT met'}); the same answers both ways: ${same ? 'yes' : 'NO'}`,
      '',
      `refusal rate by α (harmful prompts / benign prompts): ${alphas.map((a, k) => {
        const row = bestTogether!.answers[k]!;
        const rate = (h: number) => row.filter((x, i) => i % 2 === h && x.content.startsWith('sorry')).length / row.filter((_, i) => i % 2 === h).length;
        return `α ${a}: ${rate(0).toFixed(2)} / ${rate(1).toFixed(2)}`;
      }).join('; ')}`,
    ];
    finishBench(flag('json') ?? join(tmpdir(), 'safekeep-bench-serve-sweep.json'), { ratio, same, inTurn: { tokensPerS: bestTurn!.tokensPerS, wallS: bestTurn!.wallS }, together: { tokensPerS: bestTogether!.tokensPerS, wallS: bestTogether!.wallS }, alphas }, out, loads);
  } finally {
    agent.destroy();
    proc?.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
}
