/**
 * A MIME renderer for the event output the sandbox kernel persists (EVENT_MIME plus a
 * text/plain line). Where this extension is installed the output reads as a status line with
 * badges; everywhere else (nbviewer, GitHub, VS Code, `jupyter nbconvert`) the same saved output
 * shows its text line, so the notebook needs nothing from the frontend to be readable.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { EVENT_MIME } from './event';
import { renderEvent } from './view';

class EventRenderer extends Widget implements IRenderMime.IRenderer {
  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const fallback = model.data['text/plain'];
    this.node.replaceChildren(
      renderEvent(model.data[EVENT_MIME], typeof fallback === 'string' ? fallback : '')
    );
  }
}

const eventRenderer: IRenderMime.IExtension = {
  id: 'rewyn-kernel:event-renderer',
  description: 'Shows a sandbox execution event output as one status line.',
  // Safe: it writes text nodes only, so untrusted (reopened) notebooks render it too.
  rendererFactory: {
    safe: true,
    mimeTypes: [EVENT_MIME],
    createRenderer: () => new EventRenderer()
  },
  // Ahead of text/plain (whose rank is 120), so the line replaces the text fallback.
  rank: 80,
  dataType: 'json'
};

export default eventRenderer;
