/**
 * The rewyn-kernel JupyterLab / Notebook 7 extension: each cell run on the sandbox kernel keeps
 * the record of its latest execution in its own metadata (recorder.ts), a status line under the
 * cell shows it (status.ts), and the event output the kernel persists on request reads as the
 * same line (the MIME renderer in renderer.ts). The commands "Undo the last cell's changes to
 * the state" and "Undo back to this cell" ask the kernel for an undo (undo.ts); their menu
 * entries (Kernel menu, a code cell's context menu) and shortcut are declared in
 * schema/undo.json. A cell an MCP agent wrote into a live notebook carries a banner that says
 * so, and on a cell waiting for the person's approval offers to run or reject it (agent.ts).
 * A host the proxy refused a cell is offered in its status line, to allow for the notebook; the
 * command "Network grants of this notebook" lists and revokes what was allowed (grant.ts).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { AgentBanners } from './agent';
import { GRANTS_COMMAND, GRANTS_LABEL, showGrants } from './grant';
import { CellEventRecorder } from './recorder';
import { CellStatusLines } from './status';
import {
  UNDO_COMMAND,
  UNDO_LABEL,
  UNDO_TO_COMMAND,
  UNDO_TO_LABEL,
  UndoState,
  undoLastCell
} from './undo';

const cellEvents: JupyterFrontEndPlugin<void> = {
  id: 'rewyn-kernel:cell-events',
  description: 'Keeps the sandbox kernel\'s execution events in the metadata of the cells that ran.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_: JupyterFrontEnd, notebooks: INotebookTracker): void => {
    const watch = (panel: NotebookPanel): void => {
      new CellEventRecorder(panel);
    };
    notebooks.forEach(watch);
    notebooks.widgetAdded.connect((__, panel) => watch(panel));
  }
};

const statusLines: JupyterFrontEndPlugin<void> = {
  id: 'rewyn-kernel:status-lines',
  description: 'Shows under each cell how its latest sandboxed execution ended, from its metadata.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_: JupyterFrontEnd, notebooks: INotebookTracker): void => {
    const watch = (panel: NotebookPanel): void => {
      new CellStatusLines(panel, UndoState.of(panel) ?? new UndoState(panel));
    };
    notebooks.forEach(watch);
    notebooks.widgetAdded.connect((__, panel) => watch(panel));
  }
};

const agentCells: JupyterFrontEndPlugin<void> = {
  id: 'rewyn-kernel:agent-cells',
  description:
    "Marks the cells an MCP agent wrote, and lets the person run or reject the ones it proposes.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_: JupyterFrontEnd, notebooks: INotebookTracker): void => {
    const watch = (panel: NotebookPanel): void => {
      new AgentBanners(panel);
    };
    notebooks.forEach(watch);
    notebooks.widgetAdded.connect((__, panel) => watch(panel));
  }
};

const undo: JupyterFrontEndPlugin<void> = {
  id: 'rewyn-kernel:undo',
  description: "Undo the last cell's changes to the state, on the sandbox kernel.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, notebooks: INotebookTracker): void => {
    const current = (): NotebookPanel | null => notebooks.currentWidget;
    const stateOf = (panel: NotebookPanel): UndoState =>
      UndoState.of(panel) ?? new UndoState(panel);
    const changed = (): void => {
      app.commands.notifyCommandChanged(UNDO_COMMAND);
      app.commands.notifyCommandChanged(UNDO_TO_COMMAND);
    };
    const refresh = (panel: NotebookPanel): void => {
      stateOf(panel).onChange(changed);
    };
    notebooks.forEach(refresh);
    notebooks.widgetAdded.connect((__, panel) => refresh(panel));
    notebooks.currentChanged.connect(changed);
    notebooks.activeCellChanged.connect(changed);
    const show = (ok: boolean, text: string): void => {
      const options = { autoClose: ok ? 8000 : false } as const;
      if (ok) {
        Notification.success(text, options);
      } else {
        Notification.warning(text, options);
      }
    };
    /** The active cell's execution count, where an undo can go back to before it. */
    const reachable = (): { panel: NotebookPanel; count: number } | null => {
      const panel = current();
      const cell = panel?.content.activeCell;
      if (!panel || !cell || cell.model.type !== 'code' || !stateOf(panel).ours) {
        return null;
      }
      const count = stateOf(panel).reachFor(cell.model.id);
      return count === null ? null : { panel, count };
    };
    app.commands.addCommand(UNDO_TO_COMMAND, {
      label: UNDO_TO_LABEL,
      caption:
        'Put the variables back as they were before this cell ran, undoing it and the cells ' +
        'run after it (files are not rolled back)',
      isEnabled: () => reachable() !== null,
      isVisible: () => reachable() !== null,
      execute: async () => {
        const target = reachable();
        if (target === null) {
          return;
        }
        const { ok, text } = await undoLastCell(target.panel, target.count);
        show(ok, text);
      }
    });
    app.commands.addCommand(UNDO_COMMAND, {
      label: UNDO_LABEL,
      caption:
        'Put the variables back as they were before the last cell ran (files are not rolled ' +
        'back): the sandbox kernel keeps the state before its last cells',
      isEnabled: () => {
        const panel = current();
        return panel !== null && stateOf(panel).ours;
      },
      execute: async () => {
        const panel = current();
        if (panel === null || !stateOf(panel).ours) {
          return;
        }
        const { ok, text } = await undoLastCell(panel);
        show(ok, text);
      }
    });
  }
};

const grants: JupyterFrontEndPlugin<void> = {
  id: 'rewyn-kernel:network-grants',
  description: 'Lists and revokes the hosts allowed to a notebook from the page (grant.ts).',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    notebooks: INotebookTracker,
    palette: ICommandPalette | null
  ): void => {
    app.commands.addCommand(GRANTS_COMMAND, {
      label: GRANTS_LABEL,
      caption: 'The hosts this notebook\'s code may reach because the person allowed them',
      isEnabled: () => notebooks.currentWidget !== null,
      execute: async () => {
        const panel = notebooks.currentWidget;
        if (panel !== null) {
          await showGrants(panel);
        }
      }
    });
    palette?.addItem({ command: GRANTS_COMMAND, category: 'Sandbox kernel' });
  }
};

export default [cellEvents, statusLines, agentCells, undo, grants];
