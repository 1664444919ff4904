/**
 * A LocalBackend tokenizer for tests on random checkpoints: one token per character (ids 1..V−1), decoded as `<id>`
 * per token, so replies compare token for token and a stop string can be any run of them.
 */
import type { LocalTokenizer } from '../../src/chat/local.ts';
import type { ChatMessage } from '../../src/guard/types.ts';

export function charTokenizer(vocabSize: number): LocalTokenizer {
  return {
    family: 'llama3',
    render: (messages: readonly ChatMessage[]) => messages.map((m) => `${m.role}:${String(m.content)}`).join('|') + '|assistant:',
    encode: (text: string) => [...text].map((ch) => 1 + (ch.codePointAt(0)! % (vocabSize - 1))),
    decode: (ids: readonly number[]) => ids.map((i) => `<${i}>`).join(''),
  };
}
