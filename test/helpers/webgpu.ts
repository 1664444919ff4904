/**
 * Whether onnxruntime's WebGPU provider finds an adapter here: a one-MatMul session on ['webgpu'] alone. The webgpu
 * tests skip with the returned reason (what to install) when it does not.
 */
import * as ort from 'onnxruntime-node';
import { GraphBuilder } from '../../src/engine/graph/onnx/builder.ts';
import { DataType } from '../../src/engine/graph/onnx/proto.ts';
import { WEBGPU_HINT } from '../../src/engine/runtime/session.ts';

let probed: Promise<string | false> | undefined;

/** false when a WebGPU adapter runs a MatMul; else the skip reason */
export function webgpuSkipReason(): Promise<string | false> {
  probed ??= (async () => {
    const g = new GraphBuilder();
    const x = g.input('x', DataType.FLOAT, [2, 2]);
    g.output('y', g.op('MatMul', [x, x]), DataType.FLOAT, [2, 2]);
    try {
      const s = await ort.InferenceSession.create(g.encode('probe'), { executionProviders: ['webgpu'], logSeverityLevel: 4 });
      const y = (await s.run({ x: new ort.Tensor('float32', Float32Array.from([1, 2, 3, 4]), [2, 2]) })).y!.data as Float32Array;
      await s.release();
      return y[0] === 7 ? false : `the WebGPU adapter computes a wrong MatMul (${y[0]} for 7)`;
    } catch (e) {
      return `${WEBGPU_HINT} — ${String((e as Error).message).split('\n')[0]!.slice(-120)}`;
    }
  })();
  return probed;
}
