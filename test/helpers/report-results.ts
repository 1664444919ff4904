/** AnalysisResults for report tests: the planted scenario analysed for real, plus steering counts as input data. */
import { analyze } from '../../src/analysis/analyze.ts';
import type { AnalysisResults } from '../../src/analysis/results.ts';
import { scenarioInput } from './analysis-scenario.ts';

export function syntheticResults(): AnalysisResults {
  const res = analyze(scenarioInput({ reps: 200 }));
  res.steering = [
    {
      layer: res.lStar.layer,
      direction: 'Schema Direction (harmful)',
      requests: 'harmful',
      rows: [0, 4, 8, 12].map((alpha, i) => ({
        alpha,
        alphaRelative: alpha / 7,
        n: 40,
        counts: { refusal: [2, 19, 8, 0][i]!, valid: [38, 18, 1, 0][i]!, invalid: [0, 3, 31, 40][i]! },
      })),
    },
  ];
  res.notes = ['Synthetic planted activations: a refusal direction at layers 3–4, suppressed by JSON schemas.'];
  return res;
}
