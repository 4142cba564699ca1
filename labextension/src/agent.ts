/**
 * The banner on each cell an MCP agent wrote into a live notebook (issue 28): whose cell it is,
 * and, on a cell the agent proposed for the person's approval, the policy's reason with "Run"
 * and "Reject…". Drawn from the cell's metadata (`rewyn_kernel.agent`, event.ts) as status.ts
 * draws its line: an element added to the cell's node, below the cell's code and outputs (a
 * proposed cell has no outputs: the banner comes right under its code), redrawn when the
 * metadata changes, text nodes only.
 *
 * The person approves by running the cell (the button or Shift-Enter): the recorder puts the
 * kernel's record in the cell's metadata and the server, which watches the shared document,
 * marks the cell approved or edited. A rejection is written here, as `agent.decision`, and the
 * server marks the cell rejected. Neither is this extension's to enforce: the banner only
 * offers the two choices and shows what the server made of them.
 *
 * The buttons are live only while the agent waits: a cell its server marked withdrawn (the call
 * ended first), or one whose agent has left the shared document (its client is gone from the
 * document's awareness: the server stopped, however it stopped), says so and offers nothing.
 */
import { InputDialog } from '@jupyterlab/apputils';
import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

import { agentOf, IAgentCell, METADATA_KEY, withRejection } from './event';
import { LINE_CLASS } from './status';

const CELL_CLASS = 'rewyn-AgentCell';
const BANNER_CLASS = 'rewyn-AgentBanner';
const RUN_CLASS = 'rewyn-AgentRun';
const REJECT_CLASS = 'rewyn-AgentReject';

type Cell = NotebookPanel['content']['widgets'][number];

/** What this view needs of the shared document's awareness (y-protocols' Awareness). */
interface IPresence {
  getStates(): Map<number, unknown>;
  on(name: 'change', listener: () => void): void;
  off(name: 'change', listener: () => void): void;
}

export class AgentBanners {
  constructor(private readonly panel: NotebookPanel) {
    const notebook = panel.content;
    notebook.model?.cells.changed.connect(() => this.watchAll(), this);
    notebook.modelContentChanged.connect(() => this.watchAll(), this);
    panel.context.ready.then(
      () => {
        this.watchPresence();
        this.watchAll();
      },
      () => undefined
    );
    this.watchPresence();
    this.watchAll();
  }

  /** Redraw when someone joins or leaves the shared document (an agent among them). */
  private watchPresence(): void {
    const shared = this.panel.context.model?.sharedModel as unknown as { awareness?: unknown };
    const awareness = shared?.awareness as IPresence | undefined;
    if (
      this.presence !== null ||
      !awareness ||
      typeof awareness.getStates !== 'function' ||
      typeof awareness.on !== 'function'
    ) {
      return;
    }
    this.presence = awareness;
    const redraw = (): void => this.watchAll();
    awareness.on('change', redraw);
    this.panel.disposed.connect(() => awareness.off('change', redraw));
  }

  /**
   * Whether the agent has left the document: its awareness client (`agent.client`) is no longer
   * among those present. Unknown (no awareness here, or no client named) is not gone.
   */
  private gone(agent: IAgentCell): boolean {
    if (agent.client === null || this.presence === null) {
      return false;
    }
    return !this.presence.getStates().has(agent.client);
  }

  private watchAll(): void {
    if (this.panel.isDisposed) {
      return;
    }
    for (const cell of this.panel.content.widgets) {
      if (!this.watched.has(cell)) {
        this.watched.add(cell);
        cell.model.metadataChanged.connect(() => this.draw(cell), this);
        cell.disposed.connect(() => this.watched.delete(cell));
      }
      this.draw(cell);
    }
  }

  private draw(cell: Cell): void {
    if (cell.isDisposed) {
      return;
    }
    const agent = agentOf(cell.model.getMetadata(METADATA_KEY));
    let banner = cell.node.querySelector(`:scope > .${BANNER_CLASS}`) as HTMLElement | null;
    cell.node.classList.toggle(CELL_CLASS, agent !== null);
    if (agent === null) {
      banner?.remove();
      return;
    }
    const busy = this.busy.has(cell);
    const gone = agent.state === 'pending' && this.gone(agent);
    const key = JSON.stringify([agent, busy, gone]);
    if (banner !== null && banner.dataset.key === key) {
      return;
    }
    if (banner === null) {
      banner = document.createElement('div');
      banner.className = BANNER_CLASS;
      // After the cell's own nodes, as status.ts's line: Lumino places a cell's widgets by
      // their index among the node's children, so a node of ours before them would shift
      // them. Above the status line, so the two keep one order whichever is drawn first.
      cell.node.insertBefore(banner, cell.node.querySelector(`:scope > .${LINE_CLASS}`));
    }
    banner.dataset.key = key;
    banner.dataset.state = agent.state ?? 'unknown';
    banner.dataset.agent = agent.name;
    banner.dataset.gone = gone ? 'true' : 'false';
    banner.replaceChildren(...this.content(cell, agent, busy, gone));
  }

  private content(cell: Cell, agent: IAgentCell, busy: boolean, gone: boolean): HTMLElement[] {
    // "agent <name>" opens every line: "agent <name> asks to run this cell — risk HIGH: ..."
    const label = element('span', 'rewyn-AgentBanner-label', 'agent ');
    label.append(element('span', 'rewyn-AgentBanner-name', agent.name));
    const number = agent.number !== null ? `call ${agent.number}` : 'call';
    label.title = agent.call ? `MCP ${number} (${agent.call})` : '';
    const line = element('span', 'rewyn-AgentBanner-text');
    const parts = [label, line];
    switch (agent.state) {
      case 'pending': {
        line.textContent = 'asks to run this cell';
        if (agent.risk !== null) {
          line.append(' — ');
          const level = `risk ${agent.risk.toUpperCase()}`;
          const risk = element('span', 'rewyn-AgentBanner-risk', level);
          risk.dataset.risk = agent.risk;
          line.append(risk);
        }
        if (agent.reason) {
          line.append(': ', element('span', 'rewyn-AgentBanner-reason', agent.reason));
        }
        const open = !agent.decided && !busy && !gone;
        const run = button(RUN_CLASS, 'Run', 'Run this cell as it is now: that approves it', open);
        run.addEventListener('click', () => void this.run(cell));
        const reject = button(
          REJECT_CLASS,
          'Reject…',
          'Refuse to run this cell, with a note for the agent',
          open
        );
        reject.addEventListener('click', () => void this.reject(cell, agent.name));
        if (agent.decided) {
          line.append(' (rejection sent, waiting for the server)');
        } else if (gone) {
          line.append(
            ' (the agent is gone: nothing waits for this cell, and Run would not answer it)'
          );
        }
        parts.push(element('span', 'rewyn-AgentBanner-actions', undefined, [run, reject]));
        break;
      }
      case 'approved':
        line.textContent = 'approved: run as the agent proposed it';
        break;
      case 'edited':
        line.textContent = 'approved after an edit: run as the person changed it';
        break;
      case 'rejected':
        line.textContent = 'rejected';
        if (agent.note) {
          line.append(': ', element('span', 'rewyn-AgentBanner-note', agent.note));
        }
        break;
      case 'expired':
        line.textContent = 'expired: nobody approved it in time, so it was refused';
        break;
      case 'withdrawn':
        line.textContent = 'withdrawn: the agent stopped waiting before anyone decided; not run';
        break;
      case 'running':
        line.textContent = 'running';
        break;
      case 'done':
        line.textContent = '';
        break;
      case 'interrupted':
        line.textContent = 'interrupted';
        break;
      default:
        line.textContent = 'state unknown';
    }
    return parts;
  }

  /** Run exactly this cell, where it is, without moving on to the next one. */
  private async run(cell: Cell): Promise<void> {
    const notebook = this.panel.content;
    const index = notebook.widgets.indexOf(cell);
    if (index < 0 || this.busy.has(cell)) {
      return;
    }
    this.busy.add(cell);
    this.draw(cell);
    try {
      notebook.activeCellIndex = index;
      notebook.deselectAll(); // the run takes the selection, and the active cell alone now
      await NotebookActions.run(notebook, this.panel.sessionContext);
    } finally {
      this.busy.delete(cell);
      this.draw(cell);
    }
  }

  /** Ask the person for a note, then write the rejection for the server to act on. */
  private async reject(cell: Cell, name: string): Promise<void> {
    if (this.busy.has(cell)) {
      return;
    }
    this.busy.add(cell);
    this.draw(cell);
    try {
      const answer = await InputDialog.getText({
        title: `Reject the cell ${name} proposed`,
        label: 'A note for the agent (optional): why, or what to do instead',
        placeholder: 'no note',
        okLabel: 'Reject',
        cancelLabel: 'Keep it pending'
      });
      if (!answer.button.accept || cell.isDisposed) {
        return;
      }
      // Read the metadata again: the server or another person may have moved on meanwhile.
      const entry = withRejection(cell.model.getMetadata(METADATA_KEY), answer.value ?? '');
      if (entry !== null) {
        cell.model.setMetadata(METADATA_KEY, entry);
      }
    } finally {
      this.busy.delete(cell);
      this.draw(cell);
    }
  }

  private presence: IPresence | null = null;
  private readonly watched = new Set<Cell>();
  /** Cells whose run or rejection dialog this view has under way: their buttons are off. */
  private readonly busy = new Set<Cell>();
}

function button(className: string, label: string, title: string, enabled: boolean): HTMLElement {
  const node = document.createElement('button');
  node.type = 'button';
  node.className = className;
  node.textContent = label;
  node.title = title;
  node.disabled = !enabled;
  return node;
}

function element(
  tag: string,
  className: string,
  content?: string,
  children: (HTMLElement | string)[] = []
): HTMLElement {
  const node = document.createElement(tag);
  node.className = className;
  if (content !== undefined) {
    node.textContent = content;
  }
  node.append(...children);
  return node;
}
