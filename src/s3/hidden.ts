/**
 * A hidden-state provider for `probe` checks over a local engine: the conversation rendered by the model's chat
 * template with a generation prompt, one prefill, and the residual stream at the last prompt position
 * (hidden[0] = embeddings, hidden[l] = output of block l-1, before the final norm). [L+1, d_model]. The conversation is
 * encoded as the agent's own prompt is (`encodeChat`: client text plain, never the template's control tokens), so
 * the probe reads the state the agent would be in.
 */
import type { ToolSpec } from '../data/types.ts';
import type { Engine } from '../engine/types.ts';
import { templateMessage, type LocalTokenizer } from '../chat/local.ts';
import type { ChatMessage } from '../guard/types.ts';
import type { HiddenStateProvider } from './check.ts';

export function engineHiddenStates(
  engine: Pick<Engine, 'generate' | 'numLayers' | 'dModel'>,
  tokenizer: LocalTokenizer,
  templateKwargs?: Record<string, unknown>,
): HiddenStateProvider {
  return {
    async lastTokenHidden(messages: readonly ChatMessage[], tools: readonly ToolSpec[]) {
      const history = messages.map(templateMessage);
      const ro = { tools: tools.length ? tools : null, addGenerationPrompt: true, templateKwargs };
      const ids = tokenizer.encodeChat ? tokenizer.encodeChat(history, ro) : tokenizer.encode(tokenizer.render(history, ro));
      const [g] = await engine.generate([ids], { maxNewTokens: 1, returnPromptLastHidden: true });
      if (!g?.promptLastHidden) throw new Error('engine returned no prompt hidden states');
      return { numLayers: engine.numLayers, dModel: engine.dModel, hidden: g.promptLastHidden };
    },
  };
}
