/**
 * The status line under each cell that ran on the sandbox kernel, drawn from the cell's own
 * metadata (the record the recorder or `rewyn-kernel run` keeps there), so it needs no output
 * in the notebook and shows again when the notebook is reopened. It is added to the cell's
 * node, below its outputs, without replacing the notebook's cell factory (as
 * deshaw/jupyterlab-execute-time draws its timing line), and redrawn when the record changes.
 *
 * A notebook file can hold any JSON: the record is read through the same checks as the event
 * output (text nodes only, every field typed and bounded).
 *
 * The line also says when an undo of the cell's changes to the state is available, or was
 * made (undo.ts): that is the kernel's live state, never saved in the notebook. Where the
 * proxy refused the cell a host, it offers to allow it for the notebook (grant.ts).
 */
import { NotebookPanel } from '@jupyterlab/notebook';

import { isObject, METADATA_KEY } from './event';
import { grantButtons, offersOf } from './grant';
import { UndoState } from './undo';
import { renderEvent } from './view';

export const LINE_CLASS = 'rewyn-CellStatus';
const UNDO_CLASS = 'rewyn-CellStatus-undo';

type Cell = NotebookPanel['content']['widgets'][number];

export class CellStatusLines {
  constructor(
    private readonly panel: NotebookPanel,
    private readonly undo: UndoState
  ) {
    undo.onChange(() => this.watchAll());
    const notebook = panel.content;
    notebook.model?.cells.changed.connect(() => this.watchAll(), this);
    notebook.modelContentChanged.connect(() => this.watchAll(), this);
    panel.context.ready.then(() => this.watchAll(), () => undefined);
    this.watchAll();
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
    if (cell.isDisposed || cell.model.type !== 'code') {
      return;
    }
    const entry = cell.model.getMetadata(METADATA_KEY);
    const record = isObject(entry) ? entry['record'] : undefined;
    const note = this.undo.noteFor(cell.model.id);
    const key = isObject(record) || note ? JSON.stringify([record ?? null, note]) : '';
    let line = cell.node.querySelector(`:scope > .${LINE_CLASS}`) as HTMLElement | null;
    if (!key) {
      line?.remove();
      return;
    }
    if (line !== null && line.dataset.record === key) {
      return;
    }
    if (line === null) {
      line = document.createElement('div');
      line.className = LINE_CLASS;
      cell.node.append(line);
    }
    line.dataset.record = key;
    line.replaceChildren(...(isObject(record) ? [renderEvent(record, '')] : []));
    // (hosts the proxy refused the cell: a button each, to allow them for the notebook)
    line.append(...grantButtons(this.panel, offersOf(record)));
    if (note) {
      const undo = document.createElement('span');
      undo.className = UNDO_CLASS;
      undo.textContent = note;
      line.append(undo);
    }
  }

  private readonly watched = new Set<Cell>();
}
