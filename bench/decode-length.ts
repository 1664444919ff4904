/**
 * `npm run bench:decode [-- --threads N --reps R --new K --lengths 128,512,2048 --before REV --keep DIR]`: decode
 * tokens/s against prompt length, before and after in-place KV buffers (src/engine/runtime/kv.ts), in one run.
 *
 * SmolLM2-135M-shaped random checkpoint (as bench/engine.ts). "before" is the engine of git revision REV (default: the
 * last commit with the Concat-past→present KV path), extracted with `git archive` into a temp folder (node_modules
 * linked) and run side by side with the working tree's engine. Each measurement runs in a fresh child: prefill the
 * prompt with one step, then K single-token steps (logits at the new token, no hidden states), timed; interleaved
 * before/after, best of R. Also prints prefill tokens/s (1×512, hidden + logits at the last position).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { flag, SMOLLM2_SHAPE } from './common.ts';

/** last commit whose engine concatenated past and new KV in the graph and copied the whole present out per step */
const BEFORE = 'aeec39f';

interface Measured {
  prefillTps: number;
  /** prompt length → decode tokens/s */
  decode: Record<string, number>;
}

/** what the child needs from either engine version (both have this shape) */
interface StepEngine {
  step(inp: {
    ids: BigInt64Array; batch: number; width: number; starts: number[]; past: unknown; steer: Float32Array;
    hiddenIndex: number[]; logitsIndex: number[]; wantPresent?: boolean;
  }): Promise<{ present: unknown; logits: Float32Array }>;
  forward(ids: number[][], opts: { hiddenAt: 'last'; logitsAt: 'last' }): Promise<unknown>;
  dispose(): Promise<void>;
}

async function child(modelDir: string, engineModule: string, cacheDir: string): Promise<void> {
  const threads = Number(flag('threads') ?? 1);
  const lengths = (flag('lengths') ?? '128,512,2048').split(',').map(Number);
  const nNew = Number(flag('new') ?? 32);
  const mod = await import(pathToFileURL(engineModule).href) as { createEngineFromCheckpoint: (c: unknown, o: object) => Promise<StepEngine> };
  const ck = await loadCheckpoint(modelDir);
  const engine = await mod.createEngineFromCheckpoint(ck, { threads, cacheDir });
  const c = ck.config;
  const steer = new Float32Array((c.numLayers + 1) * c.hiddenSize);
  const prompt = (n: number) => Array.from({ length: n }, (_, i) => 3 + ((i * 7919) % (c.vocabSize - 3)));
  const p512 = prompt(512);
  await engine.forward([p512.slice(0, 64)], { hiddenAt: 'last', logitsAt: 'last' });
  let t = performance.now();
  await engine.forward([p512], { hiddenAt: 'last', logitsAt: 'last' });
  const prefillTps = 512 / ((performance.now() - t) / 1000);
  const decode: Record<string, number> = {};
  for (const P of lengths) {
    const ids = prompt(P);
    let out = await engine.step({ ids: BigInt64Array.from(ids, BigInt), batch: 1, width: P, starts: [0], past: null, steer, hiddenIndex: [], logitsIndex: [P - 1] });
    // one untimed step (the first decode step allocates the buffer with room in the new engine)
    out = await engine.step({ ids: BigInt64Array.from([3n]), batch: 1, width: 1, starts: [0], past: out.present, steer, hiddenIndex: [], logitsIndex: [0] });
    t = performance.now();
    for (let k = 0; k < nNew; k++) {
      out = await engine.step({ ids: BigInt64Array.from([BigInt(4 + k)]), batch: 1, width: 1, starts: [0], past: out.present, steer, hiddenIndex: [], logitsIndex: [0] });
    }
    decode[P] = nNew / ((performance.now() - t) / 1000);
  }
  await engine.dispose();
  process.stdout.write(`RESULT ${JSON.stringify({ prefillTps, decode } satisfies Measured)}\n`);
}

async function main(): Promise<void> {
  const run = flag('run');
  if (run) return child(run, flag('engine')!, flag('cache')!);
  const reps = Number(flag('reps') ?? 3);
  const rev = flag('before') ?? BEFORE;
  const keep = flag('keep');
  const root = fileURLToPath(new URL('..', import.meta.url));
  const dir = keep ?? mkdtempSync(join(tmpdir(), 'safekeep-decode-'));
  const old = mkdtempSync(join(tmpdir(), 'safekeep-before-'));
  try {
    if (!(keep && existsSync(join(dir, 'model', 'model.safetensors')))) {
      process.stderr.write(`writing random checkpoint to ${dir} ...\n`);
      await writeRandomCheckpoint(join(dir, 'model'), 'llama', SMOLLM2_SHAPE);
    }
    // the "before" engine: src/ and package.json of REV, the same node_modules
    execFileSync('sh', ['-c', `git archive ${rev} src package.json | tar -x -C ${JSON.stringify(old)}`], { cwd: root });
    symlinkSync(join(root, 'node_modules'), join(old, 'node_modules'));
    const variants = [
      { name: `before (${rev})`, engine: join(old, 'src', 'engine', 'engine.ts'), cache: join(dir, 'cache-before') },
      { name: 'after (working tree)', engine: resolve(root, 'src', 'engine', 'engine.ts'), cache: join(dir, 'cache-after') },
    ];
    const bestOf = variants.map(() => ({ prefillTps: 0, decode: {} as Record<string, number> }));
    const passOn = ['threads', 'lengths', 'new'].flatMap((f) => (flag(f) ? [`--${f}`, flag(f)!] : []));
    for (let r = 0; r < reps; r++) {
      for (const [i, v] of variants.entries()) {
        process.stderr.write(`rep ${r + 1}/${reps}: ${v.name} ...\n`);
        const res = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--run', join(dir, 'model'), '--engine', v.engine, '--cache', v.cache, ...passOn],
          { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], cwd: root });
        const line = res.stdout.split('\n').find((l) => l.startsWith('RESULT '));
        if (res.status !== 0 || !line) throw new Error(`${v.name}: child failed (exit ${res.status})\n${res.stdout}`);
        const m = JSON.parse(line.slice(7)) as Measured;
        const b = bestOf[i]!;
        b.prefillTps = Math.max(b.prefillTps, m.prefillTps);
        for (const [P, tps] of Object.entries(m.decode)) b.decode[P] = Math.max(b.decode[P] ?? 0, tps);
      }
    }
    const lengths = Object.keys(bestOf[0]!.decode);
    const rows = [
      `| engine | prefill 1×512 tok/s | ${lengths.map((P) => `decode @${P} tok/s`).join(' | ')} |`,
      `| --- | --- | ${lengths.map(() => '---').join(' | ')} |`,
      ...variants.map((v, i) => `| ${v.name} | ${bestOf[i]!.prefillTps.toFixed(0)} | ${lengths.map((P) => bestOf[i]!.decode[P]!.toFixed(1)).join(' | ')} |`),
      `| after / before | ${(bestOf[1]!.prefillTps / bestOf[0]!.prefillTps).toFixed(2)}× | ${lengths.map((P) => `${(bestOf[1]!.decode[P]! / bestOf[0]!.decode[P]!).toFixed(2)}×`).join(' | ')} |`,
    ];
    process.stdout.write(`SmolLM2-135M shape, f32, threads ${flag('threads') ?? 1}, best of ${reps} interleaved runs, ${flag('new') ?? 32} decode steps per length\n${rows.join('\n')}\n`);
  } finally {
    rmSync(old, { recursive: true, force: true });
    if (!keep) rmSync(dir, { recursive: true, force: true });
  }
}

await main();
