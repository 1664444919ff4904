/**
 * What a decode step runs, counted on the built graph (a decode step is per-node cost on small shapes: every node
 * costs its dispatch, so the count is what this test pins down). For each attention kernel with an If on T > 1:
 * one If per layer whose decode branch (T = 1) ends in a single Reshape to [BT, H·hd] (no Transpose back from heads);
 * the residual add after attention and the MLP's RMSNorm are one SkipSimplifiedLayerNormalization per layer unless
 * resid_mid is hooked (then the sum is its own Add, read or edited before the norm). The values themselves are
 * checked against the Float64 oracle in engine.oracle.test.ts (decode and multi-token steps, all three kernels)
 * and against HF in engine.hf*-parity / hooks tests.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import onnxProto from 'onnx-proto';
import { loadCheckpoint } from '../src/checkpoint/load.ts';
import { writeRandomCheckpoint } from '../src/checkpoint/random.ts';
import { buildModelGraph, WEBGPU_MAX_SPLIT_OUTPUTS } from '../src/engine/graph/decoder.ts';
import { resolveWeightFiles } from '../src/engine/runtime/weight-files.ts';
import { TINY_MODELS } from './helpers/engine.ts';

interface PAttr { name: string; g?: PGraph }
interface PNode { name: string; opType: string; input: string[]; output: string[]; attribute: PAttr[] }
interface PGraph { node: PNode[] }
const decodeGraph = (bytes: Uint8Array): PGraph =>
  (onnxProto as unknown as { onnx: { ModelProto: { decode(b: Uint8Array): { graph: PGraph } } } }).onnx.ModelProto.decode(bytes).graph;
const count = (nodes: PNode[], op: string) => nodes.filter((n) => n.opType === op).length;
const branch = (n: PNode, name: string): PNode[] => n.attribute.find((a) => a.name === name)!.g!.node;

test('decode step: one If per layer, its decode branch ends in one Reshape; residual add + MLP norm are one node', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-graph-nodes-'));
  try {
    await writeRandomCheckpoint(tmp, 'llama', { ...TINY_MODELS.llama, seed: 3 });
    const ck = await loadCheckpoint(tmp);
    const L = ck.config.numLayers;
    const { realFiles } = resolveWeightFiles(ck);
    for (const attention of ['onnx', 'mha', 'matmul'] as const) {
      const build = (hooks?: Parameters<typeof buildModelGraph>[4]) =>
        decodeGraph(buildModelGraph(ck, { dtype: 'f32', attention, fuse: true, quant: null }, realFiles, undefined, hooks)).node;
      const main = build();
      assert.equal(count(main, 'SkipSimplifiedLayerNormalization'), L, `${attention}: one add + norm per layer`);
      assert.equal(count(main, 'SimplifiedLayerNormalization'), L + 1, `${attention}: attention norms + the final norm`);
      assert.equal(main.filter((n) => /resid_attn/.test(n.name)).length, 0, `${attention}: no separate residual Add`);
      const ifs = main.filter((n) => n.opType === 'If');
      assert.equal(ifs.length, attention === 'matmul' ? 0 : L, `${attention}: Ifs`);
      for (const f of ifs) {
        const dec = branch(f, 'else_branch');
        const last = dec.at(-1)!;
        assert.equal(last.opType, 'Reshape', `${attention}: the decode branch's output is one Reshape`);
        assert.equal(count(dec, 'Reshape'), 2, `${attention}: q to [B, kvH, rep, hd] and the output`);
        // the two Transposes are the keys' (onnxruntime folds them into the score MatMuls); none back from heads
        assert.equal(count(dec, 'Transpose'), 2, `${attention}: only the keys' Transposes`);
        // q Reshape; per score block Transpose, MatMul, Mul; Concat, Add, Softmax, Split; two MatMuls, Add; output Reshape
        assert.equal(dec.length, 15, `${attention}: decode-branch nodes`);
      }
      // resid_mid hooked at layer 1: that layer's sum is an Add the hook reads, its norm a plain RMSNorm
      const hooked = build({ capture: ['blocks.1.resid_mid'], edit: [] });
      assert.equal(count(hooked, 'SkipSimplifiedLayerNormalization'), L - 1, `${attention}: hooked layer unfused`);
      assert.equal(count(hooked, 'SimplifiedLayerNormalization'), L + 2, `${attention}: hooked layer's own norm`);
      assert.equal(hooked.filter((n) => /resid_attn/.test(n.name)).length, 1, `${attention}: the hooked sum`);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('webgpu graph: standard-op attention, every value product on the joined buffer and new slots (never an empty reduction axis)', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-graph-webgpu-'));
  try {
    await writeRandomCheckpoint(tmp, 'llama', { ...TINY_MODELS.llama, seed: 3 });
    const ck = await loadCheckpoint(tmp);
    const L = ck.config.numLayers;
    const { realFiles } = resolveWeightFiles(ck);
    const build = (device: 'cpu' | 'webgpu', hooks?: Parameters<typeof buildModelGraph>[4]) =>
      decodeGraph(buildModelGraph(ck, { dtype: 'f32', attention: 'matmul', fuse: true, quant: null, device }, realFiles, undefined, hooks)).node;
    for (const hooks of [undefined, { capture: ['blocks.1.pattern'], edit: [] }]) {
      const g = build('webgpu', hooks);
      for (const op of ['If', 'MultiHeadAttention', 'Attention']) assert.equal(count(g, op), 0, op);
      // onnxruntime 1.30's WebGPU MatMul segfaults on [.., n, 0]·[.., 0, m]: the probabilities on an empty buffer times
      // its values. Each layer's value product reads the values joined with the new slots (C + T ≥ 1) instead.
      const producer = new Map(g.flatMap((n) => n.output.map((o) => [o, n] as const)));
      const attn = g.filter((n) => n.opType === 'MatMul' && /\/attn$/.test(n.output[0]!));
      assert.equal(attn.length, L, 'one value product per layer');
      for (const n of attn) assert.equal(producer.get(n.input[1]!)?.opType, 'Concat', `${n.name} reads the joined values`);
      assert.equal(g.filter((n) => /probs_split/.test(n.output[0]!)).length, 0, 'no split probabilities');
    }
    // the CPU graph keeps the two products on the split probabilities (no copy of the buffer)
    assert.equal(build('cpu').filter((n) => /probs_split/.test(n.output[0]!)).length, L);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('webgpu graph: no Split has more outputs than a WebGPU shader binds (the per-layer intervention rows of a deep model are cut in a tree)', async () => {
  const tmp = mkdtempSync(join(tmpdir(), 'safekeep-graph-split-'));
  try {
    // 12 layers: 13 rows per intervention input, above the per-shader limit (a real 8B Llama has 33)
    await writeRandomCheckpoint(tmp, 'llama', { ...TINY_MODELS.llama, numLayers: 12, seed: 5 });
    const ck = await loadCheckpoint(tmp);
    const { realFiles } = resolveWeightFiles(ck);
    const build = (device: 'cpu' | 'webgpu') => decodeGraph(buildModelGraph(ck, { dtype: 'f32', attention: 'matmul', fuse: true, quant: null, device }, realFiles)).node;
    const splits = (g: PNode[]) => g.filter((n) => n.opType === 'Split');
    const web = build('webgpu');
    assert.ok(splits(web).every((n) => n.output.length <= WEBGPU_MAX_SPLIT_OUTPUTS), splits(web).map((n) => n.output.length).join(','));
    // every layer still gets its own row of each input: 13 leaves per input
    const leaves = (g: PNode[], name: string) => splits(g).filter((n) => n.name.includes(name)).flatMap((n) => n.output).filter((o) => !g.some((m) => m.opType === 'Split' && m.input[0] === o));
    for (const name of ['steer_rows', 'intervene_dir_rows', 'intervene_value_rows']) assert.equal(leaves(web, name).length, 13, name);
    // the CPU graph keeps one Split per input
    assert.deepEqual(splits(build('cpu')).filter((n) => /steer_rows|intervene_/.test(n.name)).map((n) => n.output.length), [13, 13, 13]);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
