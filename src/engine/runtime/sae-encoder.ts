/**
 * `SaeEncoder`: a sparse autoencoder's encode on activations already at hand (a cache, a file), run by onnxruntime
 * on the graph the engine splices into the model (graph/sae-splice.ts, capture only): x [N, d_in] → acts [N, d_sae].
 * The MatMul is onnxruntime's, so encoding runs near the machine's dense-matmul rate (bench/sae.ts prints both);
 * src/sae/math.ts `encode` is the same computation in TypeScript (and the one that reads normalize_activations).
 */
import * as ort from 'onnxruntime-node';
import { SafekeepError } from '../../util/errors.ts';
import { decoderNorms } from '../../sae/math.ts';
import { f32Matrices } from '../../sae/matrix.ts';
import type { Sae } from '../../sae/types.ts';
import { GraphBuilder } from '../graph/onnx/builder.ts';
import { DataType } from '../graph/onnx/proto.ts';
import { SAE_IO, saeSplice, type SaeGraphSpec } from '../graph/sae-splice.ts';

const POINT = 'x';

export class SaeEncoder {
  private constructor(private readonly session: ort.InferenceSession, private readonly feeds: Record<string, ort.Tensor>, readonly sae: Sae) {}

  static async open(sae: Sae, opts: { threads?: number } = {}): Promise<SaeEncoder> {
    const c = sae.config;
    if (c.normalizeActivations !== 'none') throw new SafekeepError(`SaeEncoder: normalize_activations ${c.normalizeActivations} is not built into the graph (use sae.encode)`);
    const spec: SaeGraphSpec = {
      hook: POINT, architecture: c.architecture, dIn: c.dIn, dSae: c.dSae, k: c.k, applyBDecToInput: c.applyBDecToInput,
      rescaleActsByDecoderNorm: c.rescaleActsByDecoderNorm, splice: 'capture', captureActs: true,
    };
    const g = new GraphBuilder();
    const x = g.input('x', DataType.FLOAT, ['n', c.dIn]);
    saeSplice(g, spec, x);
    const bytes = g.encode('sae_encode');
    const session = await ort.InferenceSession.create(bytes, {
      executionProviders: ['cpu'], graphOptimizationLevel: 'all', interOpNumThreads: 1, executionMode: 'sequential',
      ...(opts.threads ? { intraOpNumThreads: opts.threads } : {}),
      extra: { session: { intra_op: { allow_spinning: '0' }, inter_op: { allow_spinning: '0' } } }, logSeverityLevel: 3,
    });
    const t = (data: Float32Array, dims: number[]) => new ort.Tensor('float32', data, dims);
    const feeds: Record<string, ort.Tensor> = {
      [SAE_IO.W_enc(POINT)]: t(f32Matrices(sae).W_enc, [c.dIn, c.dSae]),
      [SAE_IO.b_enc(POINT)]: t(sae.b_enc, [c.dSae]),
      [SAE_IO.b_dec(POINT)]: t(sae.b_dec, [c.dIn]),
      ...(c.architecture === 'jumprelu' ? { [SAE_IO.threshold(POINT)]: t(sae.threshold!, [c.dSae]) } : {}),
      ...(spec.architecture === 'topk' && spec.rescaleActsByDecoderNorm ? { [SAE_IO.decNorm(POINT)]: t(decoderNorms(sae), [c.dSae]) } : {}),
    };
    return new SaeEncoder(session, feeds, sae);
  }

  /** x [n, d_in] → acts [n, d_sae] */
  async encode(x: Float32Array, n: number): Promise<Float32Array> {
    const { dIn } = this.sae.config;
    if (x.length !== n * dIn) throw new SafekeepError(`SaeEncoder: ${x.length} values, not ${n} × d_in ${dIn}`);
    const out = await this.session.run({ ...this.feeds, x: new ort.Tensor('float32', x, [n, dIn]) });
    return out[SAE_IO.acts(POINT)]!.data as Float32Array;
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}
