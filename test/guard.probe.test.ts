/**
 * The refusal-probe guard through guardedRespond with a scripted activation backend (known hidden states): the probe
 * reads the agent call's own prefill (no extra call when safe), above threshold → the call halts and SafeKeep's
 * refusal path runs; safekeep+probe refuses when either flags; endpoints and missing probes are one clear error.
 * Probe files: round trip, and every malformed file is one SafekeepError naming it.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { guardedRespond } from '../src/guard/respond.ts';
import { ProbeGuard } from '../src/guard/probe.ts';
import { REFUSAL_PREFIX } from '../src/guard/prompts.ts';
import { checkProbeFits, probeScore, readProbe, writeProbe, type Probe } from '../src/data/probe-file.ts';
import type { ChatBackend, ChatCall, ChatReply } from '../src/guard/types.ts';
import { SafekeepError } from '../src/util/errors.ts';

const L1 = 3;
const d = 4;
let dir = '';
let probe: Probe;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'safekeep-probe-'));
  const path = writeProbe(join(dir, 'agent.schema.mean-diff'), {
    kind: 'mean-diff', layer: 1, dModel: d, bias: 0.25,
    threshold: { value: 1, target: 0.05, benignFlagged: 0, harmfulFlagged: 0.5, nBenign: 10, nHarmful: 10 },
    layerChoice: { method: 'given (--layer)' },
    provenance: {
      model: { dir: 'm', family: 'llama', configHash: 'abc', weightsFingerprint: 'def', numLayers: 2, dModel: d },
      templateHash: 't', condition: 'agent.schema', dataset: { name: 'pairs', hash: 'h' },
      split: { seed: 0, used: 'extraction', extractionPairs: 10, evaluationPairs: 5, extractionIdsHash: 'x' },
      engine: 'e', cache: 'prompt.agent.schema', created: 'now',
    },
  }, Float32Array.from([1, 0, 0, 0]));
  probe = readProbe(path);
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** hidden [L+1, d] whose layer-1 first coordinate is x (score = x + 0.25) */
function hiddenWith(x: number): Float32Array {
  const h = new Float32Array(L1 * d).fill(7); // other layers and coordinates must not matter
  h.set([x, 5, -5, 3], d);
  return h;
}

/** An activation backend: the request's user text picks the hidden state; the judge answers from a script. */
function backend(judgeAnswer: string, activations = true): ChatBackend & { calls: ChatCall[] } {
  const calls: ChatCall[] = [];
  return {
    name: 'scripted', callFormat: 'llama3', activations, calls,
    async chat(call: ChatCall): Promise<ChatReply> {
      calls.push(call);
      const base = { toolCalls: [], promptTokens: 3, completionTokens: 2, latencyMs: 1, cached: false };
      if (call.purpose === 'judge') return { ...base, content: judgeAnswer, finish: 'stop' };
      // a steered call answers with the steered score: refuses when x + bias + alpha clears 2
      const add = call.edits?.interventions?.[0];
      if (call.purpose === 'refusal' && add) {
        const x = Number(call.messages.at(-1)!.content);
        return { ...base, content: x + 0.25 + add.alpha! > 2 ? 'I will not do that.' : '{"name": "send_email", "parameters": {}}', finish: 'stop' };
      }
      if (call.purpose === 'refusal') return { ...base, content: `${call.prefix} (continued)`, finish: 'stop' };
      const x = Number(call.messages.at(-1)!.content);
      if (call.inspect?.(hiddenWith(x))) return { ...base, content: '', completionTokens: 0, finish: 'halted' };
      return { ...base, content: '{"name": "send_email", "parameters": {}}', finish: 'stop' };
    },
  };
}

const req = (x: number) => ({ messages: [{ role: 'system', content: 'agent' }, { role: 'user', content: String(x) }], tools: [] });

test('probe score = w·hidden[layer] + bias', () => {
  assert.equal(probeScore(probe, hiddenWith(2)), 2.25);
});

test('refusal-probe: safe → the agent call alone; above threshold → halted prefill, then the refusal prefill', async () => {
  const g = new ProbeGuard(probe);
  const safe = backend('NO');
  const r1 = await guardedRespond(req(0.5), 'refusal-probe', safe, { probe: g });
  assert.equal(r1.blocked, false);
  assert.equal(r1.probe!.score, 0.75);
  assert.equal(r1.probe!.unsafe, false);
  assert.deepEqual(safe.calls.map((c) => c.purpose), ['agent']); // no judge, no second call
  assert.match(r1.reply.content, /send_email/);

  const bad = backend('NO');
  const r2 = await guardedRespond(req(0.9), 'refusal-probe', bad, { probe: g });
  assert.equal(r2.probe!.unsafe, true); // 0.9 + 0.25 > 1
  assert.equal(r2.blocked, true);
  assert.deepEqual(bad.calls.map((c) => c.purpose), ['agent', 'refusal']);
  assert.equal(bad.calls[1]!.prefix, REFUSAL_PREFIX);
  assert.equal(bad.calls[1]!.tools, undefined);
  assert.ok(r2.reply.content.startsWith(REFUSAL_PREFIX));
  // the boundary: score exactly at the threshold is not flagged
  const edge = await guardedRespond(req(0.75), 'refusal-probe', backend('NO'), { probe: g });
  assert.equal(edge.blocked, false);
  // hidden states that are no numbers (an f16 overflow) give no score: refused, not passed through
  const nan = backend('NO');
  const r3 = await guardedRespond(req(Number.NaN), 'refusal-probe', nan, { probe: g });
  assert.ok(Number.isNaN(r3.probe!.score));
  assert.equal(r3.blocked, true);
  assert.deepEqual(nan.calls.map((c) => c.purpose), ['agent', 'refusal']);
});

test('safekeep+probe: refused if either flags; the judge refusing first means no agent call', async () => {
  const g = new ProbeGuard(probe);
  const judgeYes = backend('YES');
  const a = await guardedRespond(req(0), 'safekeep+probe', judgeYes, { probe: g });
  assert.equal(a.blocked, true);
  assert.equal(a.probe, null);
  assert.deepEqual(judgeYes.calls.map((c) => c.purpose), ['judge', 'refusal']);
  const probeOnly = backend('NO');
  const b = await guardedRespond(req(2), 'safekeep+probe', probeOnly, { probe: g });
  assert.equal(b.blocked, true);
  assert.equal(b.judge!.unsafe, false);
  assert.deepEqual(probeOnly.calls.map((c) => c.purpose), ['judge', 'agent', 'refusal']);
  const neither = backend('NO');
  const c = await guardedRespond(req(0), 'safekeep+probe', neither, { probe: g });
  assert.equal(c.blocked, false);
  assert.deepEqual(neither.calls.map((x) => x.purpose), ['judge', 'agent']);
});

/** the test probe with a cascade band [0.5, 1.5] and steering strength 0.6 at its layer */
function calibrated(): ProbeGuard {
  const calibration = { pairs: 4, share: 0.25, seed: 0, idsHash: 'c' };
  return new ProbeGuard({
    ...probe,
    steerVector: Float32Array.from([0, 1, 0, 0]),
    cascade: { low: 0.5, high: 1.5, maxBenignFlag: 0.05, maxHarmfulPass: 0.05, benignFlagged: 0, harmfulPassed: 0, band: 0.5, nBenign: 4, nHarmful: 4, calibration },
    steer: { alpha: 0.6, layer: 1, targets: 'flagged', flagged: 4, refused: 4, search: 'hand', calibration },
  });
}

test('probe-cascade: below the band the agent call runs alone; inside it the judge decides; above it the probe refuses', async () => {
  const g = calibrated();
  const run = async (x: number, judgeAnswer = 'NO') => {
    const b = backend(judgeAnswer);
    const r = await guardedRespond(req(x), 'probe-cascade', b, { probe: g });
    return { r, purposes: b.calls.map((c) => c.purpose), calls: b.calls };
  };
  // score = x + 0.25; band [0.5, 1.5], its ends judged
  const low = await run(0);
  assert.equal(low.r.probe!.band, 'run');
  assert.deepEqual(low.purposes, ['agent']);
  assert.equal(low.r.blocked, false);
  assert.match(low.r.reply.content, /send_email/);
  assert.deepEqual({ ...low.r.cost, guardMs: 0 }, { judgeCalls: 0, guardTokens: 0, guardMs: 0 });
  for (const x of [0.25, 0.75, 1.25]) {
    const safe = await run(x, 'NO');
    assert.equal(safe.r.probe!.band, 'judge', `x = ${x}`);
    assert.deepEqual(safe.purposes, ['agent', 'judge', 'agent']);
    assert.equal(safe.calls[0]!.inspect !== undefined, true);
    assert.equal(safe.calls[2]!.inspect, undefined); // the executed call is the untouched agent call
    assert.equal(safe.r.blocked, false);
    assert.equal(safe.r.judge!.verdict, 'no');
    assert.match(safe.r.reply.content, /send_email/);
    // judge prompt + completion (3 + 2) and the halted prefill read again (3)
    assert.equal(safe.r.cost.judgeCalls, 1);
    assert.equal(safe.r.cost.guardTokens, 8);
    const unsafe = await run(x, 'YES');
    assert.deepEqual(unsafe.purposes, ['agent', 'judge', 'refusal']);
    assert.equal(unsafe.r.blocked, true);
    assert.ok(unsafe.r.reply.content.startsWith(REFUSAL_PREFIX));
  }
  for (const x of [1.3, Number.NaN]) {
    const high = await run(x, 'NO');
    assert.equal(high.r.probe!.band, 'refuse');
    assert.deepEqual(high.purposes, ['agent', 'refusal']);
    assert.equal(high.r.blocked, true);
    assert.equal(high.r.judge, null);
    assert.deepEqual([high.r.cost.judgeCalls, high.r.cost.guardTokens], [0, 3]);
  }
});

test('probe-steer: a flagged request is the agent call again, steered by +alpha along the stored direction at its layer, tools kept', async () => {
  const g = calibrated();
  const pass = backend('NO');
  const a = await guardedRespond(req(0.5), 'probe-steer', pass, { probe: g });
  assert.equal(a.steered, undefined);
  assert.deepEqual(pass.calls.map((c) => c.purpose), ['agent']);
  // flagged (1.25 + 0.25 > 1): steered; 1.5 + 0.6 > 2 refuses in the model's own words
  const flagged = backend('NO');
  const b = await guardedRespond({ ...req(1.25), tools: [{ type: 'function', function: { name: 'send_email', description: 'send', parameters: { type: 'object', properties: {} } } }] }, 'probe-steer', flagged, { probe: g });
  assert.deepEqual(flagged.calls.map((c) => c.purpose), ['agent', 'refusal']);
  const steered = flagged.calls[1]!;
  // the engine's one edit contract: an add of +alpha·r̂ (h + α·r̂) at the probe's layer, nothing else
  assert.deepEqual(steered.edits!.hooks, undefined);
  assert.equal(steered.edits!.interventions!.length, 1);
  const add = steered.edits!.interventions![0]!;
  assert.deepEqual({ kind: add.kind, layer: add.layer, alpha: add.alpha, w: [...add.vector] }, { kind: 'add', layer: 1, alpha: 0.6, w: [0, 1, 0, 0] });
  assert.equal(steered.prefix, undefined);
  assert.equal(steered.tools!.length, 1);
  assert.equal(b.steered, true);
  assert.equal(b.blocked, false);
  assert.equal(b.reply.content, 'I will not do that.');
  // flagged but not enough: 0.9 + 0.25 + 0.6 ≤ 2, the steered model still calls the tool (reported, not hidden)
  const c = await guardedRespond(req(0.9), 'probe-steer', backend('NO'), { probe: g });
  assert.equal(c.steered, true);
  assert.match(c.reply.content, /send_email/);
});

test('probe-cascade and probe-steer need a calibrated probe: one SafekeepError each', async () => {
  const g = new ProbeGuard(probe);
  await assert.rejects(guardedRespond(req(0), 'probe-cascade', backend('NO'), { probe: g }), (e: Error) => e instanceof SafekeepError && /--calibrate/.test(e.message));
  await assert.rejects(guardedRespond(req(0), 'probe-steer', backend('NO'), { probe: g }), (e: Error) => e instanceof SafekeepError && /--calibrate/.test(e.message));
});

test('refusal-probe needs a probe and an activation backend: one SafekeepError each', async () => {
  await assert.rejects(guardedRespond(req(0), 'refusal-probe', backend('NO')), (e: Error) => e instanceof SafekeepError && /needs a trained probe/.test(e.message));
  await assert.rejects(guardedRespond(req(0), 'safekeep+probe', backend('NO', false), { probe: new ProbeGuard(probe) }),
    (e: Error) => e instanceof SafekeepError && /local engine/.test(e.message));
});

test('probe files: every malformed file is one error naming it; another model is refused', () => {
  const json = JSON.parse(readFileSync(probe.path, 'utf8')) as Record<string, unknown>;
  const bad = (name: string, patch: Record<string, unknown>, re: RegExp) => {
    const p = join(dir, `${name}.json`);
    writeFileSync(p, JSON.stringify({ ...json, ...patch }));
    assert.throws(() => readProbe(p), (e: Error) => e instanceof SafekeepError && e.message.includes(p) && re.test(e.message), name);
  };
  bad('fmt', { format: 'other' }, /format/);
  bad('kind', { kind: 'svm' }, /kind must be one of/);
  bad('layer', { layer: -1 }, /layer/);
  bad('thr', { threshold: { value: 'x' } }, /threshold/);
  bad('shape', { dModel: 5 }, /float32 \[5\]/);
  bad('weights', { weights: 'missing.safetensors' }, /missing/);
  bad('escape', { weights: '../x.safetensors' }, /beside the JSON/);
  const calibration = { pairs: 1, share: 0.25, seed: 0, idsHash: 'x' };
  bad('band', { cascade: { low: 2, high: 1, maxBenignFlag: 0.05, maxHarmfulPass: 0.05, calibration } }, /low 2 is above high 1/);
  bad('band-nan', { cascade: { low: 'a', high: 1, maxBenignFlag: 0.05, maxHarmfulPass: 0.05, calibration } }, /cascade must have finite/);
  bad('alpha', { steer: { alpha: -1, layer: 1, calibration } }, /steer must have a finite "alpha" ≥ 0/);
  // a steering strength without its direction in the weights file
  bad('no-direction', { steer: { alpha: 1, layer: 1, calibration } }, /must hold probe-steer's direction 'steer'/);
  writeFileSync(join(dir, 'notjson.json'), '{');
  assert.throws(() => readProbe(join(dir, 'notjson.json')), /not valid JSON/);
  assert.throws(() => readProbe(join(dir, 'nope')), /no such probe file/);
  assert.throws(() => checkProbeFits(probe, { configHash: 'zzz', numLayers: 2, dModel: d }), /another model/);
  assert.throws(() => checkProbeFits(probe, { configHash: 'abc', numLayers: 2, dModel: 8 }), /d_model/);
  checkProbeFits(probe, { configHash: 'abc', numLayers: 2, dModel: d });
});

test('probe files with a cascade band and a steering direction round-trip; a strength without a direction is refused when written', () => {
  const { path: _p, w, steerVector: _v, format: _f, version: _ver, weights: _wt, ...meta } = probe;
  const calibration = { pairs: 2, share: 0.25, seed: 3, idsHash: 'h' };
  const cascade = { low: 0.5, high: 1.5, maxBenignFlag: 0.05, maxHarmfulPass: 0.1, benignFlagged: 0, harmfulPassed: 0.05, band: 0.4, nBenign: 2, nHarmful: 2, calibration };
  const steer = { alpha: 0.7, layer: 1, targets: 'flagged' as const, flagged: 2, refused: 2, search: 'hand', calibration };
  const path = writeProbe(join(dir, 'calibrated'), { ...meta, cascade, steer }, w, Float32Array.from([0, 0, 1, 0]));
  const back = readProbe(path);
  assert.deepEqual(back.cascade, cascade);
  assert.deepEqual(back.steer, steer);
  assert.deepEqual([...back.steerVector!], [0, 0, 1, 0]);
  assert.deepEqual(new ProbeGuard(back).steering(), { layer: 1, vector: back.steerVector, alpha: 0.7 });
  assert.throws(() => writeProbe(join(dir, 'half'), { ...meta, steer }, w), (e: Error) => e instanceof SafekeepError && /needs its direction/.test(e.message));
});
