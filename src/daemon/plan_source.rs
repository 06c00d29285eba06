//! A plan file as a task source (`orchestrator.plan_file`;
//! docs/ORCHESTRATOR.md): on each daemon heartbeat its open checkbox items
//! (`core::plan_source`) not yet a task by that title become tasks, and a
//! task from it that is done ticks its line. The file is small and read
//! and written whole on the loop, bounded at [`MAX_PLAN_BYTES`]; a missing
//! or unreadable file is skipped (said once per change of error).

use std::io::Read;
use std::path::Path;

use crate::core::plan_source::{open_items, tick};
use crate::core::tasks::{NewTask, Task};
use crate::core::time::Timestamp;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;

/// The largest plan file read: past it the file is left alone.
pub const MAX_PLAN_BYTES: u64 = 1 << 20;

/// The key of a task's context that names the plan file it came from.
const FROM_PLAN: &str = "plan_file";

fn read_plan(path: &Path) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > MAX_PLAN_BYTES {
        return Err(std::io::Error::other(format!(
            "not a regular file of at most {MAX_PLAN_BYTES} bytes"
        )));
    }
    let mut text = String::new();
    file.take(MAX_PLAN_BYTES).read_to_string(&mut text)?;
    Ok(text)
}

/// The context of a task from the plan file `path`: `{"plan_file": path}`.
fn plan_context(path: &Path) -> serde_json::Value {
    let mut context = serde_json::Map::new();
    context.insert(
        FROM_PLAN.to_string(),
        serde_json::Value::String(path.display().to_string()),
    );
    serde_json::Value::Object(context)
}

/// Whether `task` came from the plan file `path`.
fn from_plan(task: &Task, path: &Path) -> bool {
    task.spec
        .context
        .as_ref()
        .and_then(|c| c.get(FROM_PLAN))
        .and_then(|v| v.as_str())
        .is_some_and(|p| Path::new(p) == path)
}

impl Daemon {
    /// Adds the plan file's open items that are not tasks yet.
    pub(crate) fn import_plan(&mut self, t: Timestamp) {
        let Some(path) = self.settings.orchestrator.plan_file.clone() else {
            return;
        };
        if self.control.journal_behind().is_some() {
            return;
        }
        let text = match read_plan(&path) {
            Ok(text) => {
                self.control.plan_error = None;
                text
            }
            Err(e) => {
                let said = e.to_string();
                if self.control.plan_error.as_ref() != Some(&said) {
                    log_warn!("plan file {}: {said}; not read", path.display());
                    self.control.plan_error = Some(said);
                }
                return;
            }
        };
        let new: Vec<String> = open_items(&text)
            .into_iter()
            .filter(|item| {
                !self
                    .control
                    .queue
                    .iter()
                    .any(|task| task.spec.title == *item)
            })
            .map(str::to_string)
            .collect();
        for title in new {
            let task = NewTask {
                title,
                context: Some(plan_context(&path)),
                ..NewTask::default()
            };
            match self.control.queue.add(task, t) {
                Ok(ev) => {
                    log_info!("plan file {}: task {} added", path.display(), ev.id());
                    self.task_changed(ev, t);
                }
                Err(e) => log_warn!("plan file {}: {e}", path.display()),
            }
        }
    }

    /// Task `id` is done: tick its line in the plan file it came from.
    pub(crate) fn tick_plan(&mut self, id: u64) {
        let Some(path) = self.settings.orchestrator.plan_file.clone() else {
            return;
        };
        let Some(task) = self.control.queue.get(id).filter(|t| from_plan(t, &path)) else {
            return;
        };
        let title = task.spec.title.clone();
        let ticked = read_plan(&path).map(|text| tick(&text, &title));
        let result = match ticked {
            Ok(Some(text)) => write_plan(&path, &text),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => log_info!("plan file {}: task {id} ticked", path.display()),
            Err(e) => log_warn!("plan file {}: task {id} not ticked: {e}", path.display()),
        }
    }
}

/// Writes `text` as the plan file: a new file renamed over it, so an editor
/// or a reader never sees half of it.
fn write_plan(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("md.colibri-new");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}
