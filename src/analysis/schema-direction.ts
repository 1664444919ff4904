/**
 * The Schema Direction (Pan et al. 2026, §4): for category c ∈ {harmful, benign},
 *   R_c(ℓ) = mean over the category's requests of h_schema(ℓ) − h_text(ℓ),
 * where h_schema and h_text are the same request's hidden states with tools as JSON schemas and as flattened prose.
 */
import { SafekeepError } from '../util/errors.ts';
import type { Activations } from './activations.ts';
import { type Directions, meanActivation, subtractDirections } from './direction.ts';

/**
 * R(ℓ) over matched rows: schemaRows[i] and textRows[i] are the same request in the two representations.
 * Equal to the mean of the per-request differences. [layers, d]
 */
export function schemaDirection(
  schema: Activations,
  text: Activations,
  schemaRows: readonly number[],
  textRows: readonly number[],
): Directions {
  if (schema.layers !== text.layers || schema.d !== text.d) {
    throw new SafekeepError(`schemaDirection: schema activations [${schema.layers}, ${schema.d}] vs text [${text.layers}, ${text.d}]`);
  }
  if (schemaRows.length !== textRows.length) {
    throw new SafekeepError(`schemaDirection: ${schemaRows.length} schema rows vs ${textRows.length} text rows (must be the same requests)`);
  }
  return subtractDirections(meanActivation(schema, schemaRows), meanActivation(text, textRows));
}

/**
 * Matches rows of two representations by request key (e.g. `${pairId}:${label}`): returns index pairs for the keys
 * present in both, in the order of `a`. Throws on a duplicate key (the match would be ambiguous).
 */
export function matchRows(aKeys: readonly string[], bKeys: readonly string[]): { a: number[]; b: number[] } {
  const bIndex = new Map<string, number>();
  for (const [i, k] of bKeys.entries()) {
    if (bIndex.has(k)) throw new SafekeepError(`matchRows: request key '${k}' appears twice`);
    bIndex.set(k, i);
  }
  const seen = new Set<string>();
  const a: number[] = [];
  const b: number[] = [];
  for (const [i, k] of aKeys.entries()) {
    if (seen.has(k)) throw new SafekeepError(`matchRows: request key '${k}' appears twice`);
    seen.add(k);
    const j = bIndex.get(k);
    if (j !== undefined) {
      a.push(i);
      b.push(j);
    }
  }
  return { a, b };
}
