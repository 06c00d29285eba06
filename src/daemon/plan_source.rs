//! Plan files and a project's inbox as task sources
//! (`orchestrator.plan_file`, `orchestrator.project`;
//! docs/ORCHESTRATOR.md): on each daemon heartbeat the plan files' open
//! checkbox items and the inbox's headers and items (`core::plan_source`)
//! not yet a task by that title become tasks; the inbox is then cleared,
//! and a task from a plan file that is done ticks its line.
//!
//! The files are small and read and written whole on the loop: each at
//! most [`MAX_PLAN_BYTES`], a project scan at most [`MAX_SCAN_ENTRIES`]
//! directory entries, [`MAX_SCAN_DEPTH`] deep and [`MAX_PLAN_FILES`] plan
//! files, never through a symbolic link. A file that cannot be read is
//! skipped (said once per change of error).

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::core::plan_source::{inbox_items, is_plan_path, open_items, remove_item, tick};
use crate::core::tasks::{NewTask, Task};
use crate::core::time::Timestamp;
use crate::daemon::diag::{log_info, log_warn};
use crate::daemon::event_loop::Daemon;
use crate::platform;

/// The largest plan or inbox file read: past it the file is left alone.
pub const MAX_PLAN_BYTES: u64 = 1 << 20;
/// Directory entries a project scan looks at, at most.
pub const MAX_SCAN_ENTRIES: usize = 4096;
/// How deep under the project a scan goes.
pub const MAX_SCAN_DEPTH: usize = 8;
/// Plan files a project scan takes, at most.
pub const MAX_PLAN_FILES: usize = 64;

/// Tasks the sources may add in one heartbeat: a file that grows without
/// end (an agent appending to the inbox) fills the queue no faster.
pub const MAX_SOURCE_TASKS_PER_BEAT: usize = 256;

/// One heartbeat's intake from the sources: the titles the queue holds,
/// and how many more tasks may be added.
struct Intake {
    titles: std::collections::HashSet<String>,
    left: usize,
}

/// The key of a task's context that names the plan file it came from.
const FROM_PLAN: &str = "plan_file";
/// The key of a task's context that names the inbox it came from.
const FROM_INBOX: &str = "inbox";

/// Directories a project scan never enters: dependencies and build output
/// hold no plans of the project's own, and are large.
const SKIPPED_DIRS: [&str; 3] = ["node_modules", "target", "vendor"];

/// The directory of plan file `path`, held open, and the file's name in
/// it. A file of the project is reached from `root` one directory at a
/// time without following a link (`platform::open_dir_beneath`): a
/// directory swapped for a link, after any check, fails the open instead
/// of leading root's read and rewrite out of the project. Another file
/// (the operator's `plan_file`) is reached as named.
fn plan_dir<'p>(root: Option<&Path>, path: &'p Path) -> std::io::Result<(OwnedFd, &'p OsStr)> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other("not a file's path"));
    };
    let beneath = root.and_then(|r| parent.strip_prefix(r).ok().map(|rel| (r, rel)));
    let dir = match beneath {
        Some((root, rel)) => platform::open_dir_beneath(root, rel)?,
        None => platform::open_dir_beneath(parent, Path::new(""))?,
    };
    Ok((dir, name))
}

fn read_plan(root: Option<&Path>, path: &Path) -> std::io::Result<String> {
    // Opened without following a link and without blocking (a FIFO put
    // in the file's place would hold the loop); what was opened is then
    // checked.
    let (dir, name) = plan_dir(root, path)?;
    let file = platform::open_file_at(dir.as_fd(), name)?;
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

/// The context of a task from the source `path`: `{key: path}`.
fn source_context(key: &str, path: &Path) -> serde_json::Value {
    let mut context = serde_json::Map::new();
    context.insert(
        key.to_string(),
        serde_json::Value::String(path.display().to_string()),
    );
    serde_json::Value::Object(context)
}

/// The plan file `task` came from, if it names one.
fn plan_of(task: &Task) -> Option<PathBuf> {
    task.spec
        .context
        .as_ref()
        .and_then(|c| c.get(FROM_PLAN))
        .and_then(|v| v.as_str())
        .map(PathBuf::from)
}

/// The plan files under `root` (the seeds' `.project/plan.md`,
/// `**/*.plan.md`, `**/plans/*.md`), in a stable order, within the scan's
/// bounds; the second value says the scan stopped at a bound.
fn scan_project(root: &Path) -> (Vec<PathBuf>, bool) {
    let mut found = Vec::new();
    let mut entries = 0usize;
    let mut stack: Vec<(PathBuf, String, usize)> = vec![(root.to_path_buf(), String::new(), 0)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<(String, std::fs::FileType)> = Vec::new();
        for entry in read.flatten() {
            entries += 1;
            if entries > MAX_SCAN_ENTRIES {
                return (found, true);
            }
            let (Ok(kind), Some(name)) = (
                entry.file_type(),
                entry.file_name().to_str().map(str::to_string),
            ) else {
                continue;
            };
            names.push((name, kind));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in names.into_iter().rev() {
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if kind.is_dir() {
                let hidden = name.starts_with('.') && !(depth == 0 && name == ".project");
                if !hidden && depth + 1 < MAX_SCAN_DEPTH && !SKIPPED_DIRS.contains(&name.as_str()) {
                    stack.push((dir.join(&name), child_rel, depth + 1));
                }
            } else if kind.is_file() && is_plan_path(&child_rel) {
                found.push(dir.join(&name));
                if found.len() >= MAX_PLAN_FILES {
                    return (found, true);
                }
            }
        }
    }
    (found, false)
}

impl Daemon {
    /// The plan files to read now: `plan_file`, then the project's.
    fn plan_paths(&mut self) -> Vec<PathBuf> {
        let o = &self.settings.orchestrator;
        let mut paths: Vec<PathBuf> = o.plan_file.iter().cloned().collect();
        if let Some(root) = o.project.clone() {
            let (found, cut) = scan_project(&root);
            let said = cut.then(|| {
                format!(
                    "scan stopped at its bounds ({MAX_SCAN_ENTRIES} entries, {MAX_PLAN_FILES} plan files)"
                )
            });
            self.note_source_error(&root, said);
            self.control.scanned_plans = found.iter().cloned().collect();
            for p in found {
                if !paths.contains(&p) {
                    paths.push(p);
                }
            }
        }
        paths
    }

    /// Logs a source's error once per change; `None` clears it.
    fn note_source_error(&mut self, path: &Path, error: Option<String>) {
        let errors = &mut self.control.source_errors;
        match error {
            None => {
                errors.remove(path);
            }
            Some(said) if errors.get(path) != Some(&said) => {
                log_warn!("task source {}: {said}", path.display());
                errors.insert(path.to_path_buf(), said);
            }
            Some(_) => {}
        }
    }

    /// Reads `path`, saying (once) why not.
    fn read_source(&mut self, path: &Path) -> Option<String> {
        let root = self.settings.orchestrator.project.clone();
        match read_plan(root.as_deref(), path) {
            Ok(text) => {
                self.note_source_error(path, None);
                Some(text)
            }
            Err(e) => {
                self.note_source_error(path, Some(format!("{e}; not read")));
                None
            }
        }
    }

    /// Adds a task from a source, unless the queue has one by its title or
    /// this heartbeat's share is used up; whether it is now a task.
    fn add_from_source(
        &mut self,
        task: NewTask,
        from: &Path,
        intake: &mut Intake,
        t: Timestamp,
    ) -> bool {
        if intake.titles.contains(&task.title) {
            return true;
        }
        if intake.left == 0 {
            return false;
        }
        let title = task.title.clone();
        match self.control.queue.add(task, t) {
            Ok(ev) => {
                intake.left -= 1;
                intake.titles.insert(title);
                log_info!("task source {}: task {} added", from.display(), ev.id());
                self.task_changed(ev, t);
                true
            }
            Err(e) => {
                log_warn!("task source {}: {e}", from.display());
                false
            }
        }
    }

    /// Adds the plan files' open items and the inbox's entries that are
    /// not tasks yet (at most [`MAX_SOURCE_TASKS_PER_BEAT`] a heartbeat),
    /// and clears the inbox.
    pub(crate) fn import_plan(&mut self, t: Timestamp) {
        if self.control.journal_behind().is_some() {
            return;
        }
        // One set of the queue's titles per heartbeat: each item is then
        // checked in O(1), not against the whole queue.
        let mut intake = Intake {
            titles: self
                .control
                .queue
                .iter()
                .map(|task| task.spec.title.clone())
                .collect(),
            left: MAX_SOURCE_TASKS_PER_BEAT,
        };
        for path in self.plan_paths() {
            let Some(text) = self.read_source(&path) else {
                continue;
            };
            for title in open_items(&text) {
                let task = NewTask {
                    title: title.to_string(),
                    context: Some(source_context(FROM_PLAN, &path)),
                    ..NewTask::default()
                };
                self.add_from_source(task, &path, &mut intake, t);
            }
        }
        if intake.left == 0 {
            log_warn!(
                "task sources: {MAX_SOURCE_TASKS_PER_BEAT} tasks added this heartbeat; the rest wait for the next"
            );
        }
        self.import_inbox(&mut intake, t);
    }

    /// The project's `.project/inbox.md`: each header and item a task
    /// (unless one has its title), then the file emptied, unless someone
    /// wrote to it meanwhile or a task could not be added.
    fn import_inbox(&mut self, intake: &mut Intake, t: Timestamp) {
        let Some(root) = self.settings.orchestrator.project.clone() else {
            return;
        };
        let path = root.join(".project").join("inbox.md");
        if std::fs::symlink_metadata(&path).is_err() {
            return;
        }
        let Some(text) = self.read_source(&path) else {
            return;
        };
        let items = inbox_items(&text);
        if items.is_empty() {
            return;
        }
        let mut all_added = true;
        for item in items {
            let task = NewTask {
                title: item.title,
                description: item.description,
                context: Some(source_context(FROM_INBOX, &path)),
                ..NewTask::default()
            };
            all_added &= self.add_from_source(task, &path, intake, t);
        }
        if !all_added {
            return;
        }
        // Cleared only as it was read: a line someone added since is read
        // at the next heartbeat instead.
        let unchanged = read_plan(Some(&root), &path).is_ok_and(|now| now == text);
        if !unchanged {
            return;
        }
        match write_plan(Some(&root), &path, "") {
            Ok(()) => log_info!("inbox {}: read and cleared", path.display()),
            Err(e) => log_warn!("inbox {}: not cleared: {e}", path.display()),
        }
    }

    /// Whether `path` is a plan file colibrid reads now: the one named,
    /// or one of the project's. A task's context is anyone's to write, so
    /// a tick never rewrites a file colibrid did not take the task from.
    fn is_plan_source(&self, path: &Path) -> bool {
        self.settings.orchestrator.plan_file.as_deref() == Some(path)
            || (self.project_plan_path(path) && self.control.scanned_plans.contains(path))
    }

    /// Whether `path` names, as text, a plan file of the project: a
    /// plan-shaped path of plain components under it.
    fn project_plan_path(&self, path: &Path) -> bool {
        let Some(root) = self.settings.orchestrator.project.as_deref() else {
            return false;
        };
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        let plain = rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        plain && rel.to_str().is_some_and(is_plan_path)
    }

    /// Task `id` is done: tick its line in the plan file it came from.
    pub(crate) fn tick_plan(&mut self, id: u64) {
        let Some(task) = self.control.queue.get(id) else {
            return;
        };
        let title = task.spec.title.clone();
        let Some(path) = self.plan_source_of(id) else {
            return;
        };
        let root = self.settings.orchestrator.project.clone();
        let root = root.as_deref();
        let ticked = read_plan(root, &path).map(|text| tick(&text, &title));
        let result = match ticked {
            Ok(Some(text)) => write_plan(root, &path, &text),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => log_info!("plan file {}: task {id} ticked", path.display()),
            Err(e) => log_warn!("plan file {}: task {id} not ticked: {e}", path.display()),
        }
    }
}

impl Daemon {
    /// The plan file task `id` came from, if colibrid reads it as a source
    /// now.
    pub(crate) fn plan_source_of(&mut self, id: u64) -> Option<PathBuf> {
        let task = self.control.queue.get(id)?;
        let path = plan_of(task)?;
        // A project plan file the last scan did not see (none has run
        // since the start or a reload, or the file is new): scan again,
        // within its bounds. A path that is no plan file's by its text
        // costs no scan.
        if self.project_plan_path(&path) && !self.control.scanned_plans.contains(&path) {
            if let Some(root) = self.settings.orchestrator.project.clone() {
                self.control.scanned_plans = scan_project(&root).0.into_iter().collect();
            }
        }
        self.is_plan_source(&path).then_some(path)
    }

    /// Takes task `id`'s line out of `path` (`task-remove`).
    pub(crate) fn unplan(&mut self, id: u64, path: &Path) -> Result<(), String> {
        let Some(task) = self.control.queue.get(id) else {
            return Err(format!("no task {id}"));
        };
        let title = task.spec.title.clone();
        let root = self.settings.orchestrator.project.clone();
        let root = root.as_deref();
        let text = read_plan(root, path).map_err(|e| e.to_string())?;
        let Some(text) = remove_item(&text, &title) else {
            return Err(format!("{} has no item {title:?} any more", path.display()));
        };
        write_plan(root, path, &text).map_err(|e| e.to_string())?;
        log_info!("plan file {}: task {id}'s line removed", path.display());
        Ok(())
    }
}

/// Writes `text` as the plan file: a new file renamed over it, so an editor
/// or a reader never sees half of it. The new file gets a name no one can
/// guess ahead and is created in the file's own directory, held open
/// (`plan_dir`), never opened through a link; it keeps the old file's
/// owner and mode, so the agents that wrote the file still can.
fn write_plan(root: Option<&Path>, path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let (dir, name) = plan_dir(root, path)?;
    let old = platform::open_file_at(dir.as_fd(), name)?.metadata()?;
    if !old.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let tmp = format!(
        ".{}.colibri-{}",
        name.to_string_lossy(),
        uuid::Uuid::new_v4()
    );
    platform::replace_file_at(
        dir.as_fd(),
        name,
        OsStr::new(&tmp),
        text.as_bytes(),
        old.mode(),
        (old.uid(), old.gid()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_that_is_a_link_or_a_fifo_is_refused_and_a_rewrite_keeps_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "- root's\n").expect("secret");
        let link = dir.path().join("plan.md");
        std::os::unix::fs::symlink(&secret, &link).expect("link");
        assert!(read_plan(None, &link).is_err(), "a link is not followed");
        assert!(write_plan(None, &link, "").is_err(), "nor written through");
        assert_eq!(
            std::fs::read_to_string(&secret).ok().as_deref(),
            Some("- root's\n")
        );
        let fifo = dir.path().join("inbox.md");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        assert!(
            read_plan(None, &fifo).is_err(),
            "a FIFO is refused, not waited on"
        );
        let plan = dir.path().join("real.md");
        std::fs::write(&plan, "- [ ] a\n").expect("plan");
        std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o664)).expect("mode");
        write_plan(None, &plan, "- [x] a\n").expect("rewritten");
        let meta = std::fs::metadata(&plan).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o777, 0o664);
        assert_eq!(read_plan(None, &plan).ok().as_deref(), Some("- [x] a\n"));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("colibri-"))
            .collect();
        assert!(left.is_empty(), "no temporary file left");
    }

    #[test]
    fn a_directory_reached_through_a_link_is_not_the_projects() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("project");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("docs")).expect("docs");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(root.join("docs/a.plan.md"), "- [ ] a\n").expect("plan");
        std::fs::write(outside.join("inbox.md"), "- b\n").expect("outside file");
        let root_ = Some(root.as_path());
        assert_eq!(
            read_plan(root_, &root.join("docs/a.plan.md"))
                .ok()
                .as_deref(),
            Some("- [ ] a\n")
        );
        write_plan(root_, &root.join("docs/a.plan.md"), "- [x] a\n").expect("rewritten");
        std::os::unix::fs::symlink(&outside, root.join(".project")).expect("link");
        let inbox = root.join(".project/inbox.md");
        assert!(
            read_plan(root_, &inbox).is_err(),
            "read through no linked directory"
        );
        assert!(
            write_plan(root_, &inbox, "").is_err(),
            "nor written through one"
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("inbox.md"))
                .ok()
                .as_deref(),
            Some("- b\n")
        );
    }

    #[test]
    fn a_project_scan_finds_the_seeds_plan_files_and_no_link_or_hidden_dir() {
        let root = std::env::temp_dir().join(format!("colibri-scan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mk = |rel: &str| {
            let p = root.join(rel);
            if let Some(dir) = p.parent() {
                assert!(std::fs::create_dir_all(dir).is_ok());
            }
            assert!(std::fs::write(&p, "- [ ] x\n").is_ok());
        };
        for rel in [
            ".project/plan.md",
            ".project/inbox.md",
            "docs/release.plan.md",
            "svc/plans/migrate.md",
            "plans/notes.txt",
            ".git/plans/a.md",
            "node_modules/pkg/plans/b.md",
            "README.md",
        ] {
            mk(rel);
        }
        let outside = root.join("outside");
        assert!(std::fs::create_dir_all(outside.join("plans")).is_ok());
        assert!(std::fs::write(outside.join("plans/c.md"), "- [ ] c\n").is_ok());
        assert!(std::os::unix::fs::symlink(&outside, root.join("docs/linked")).is_ok());
        let (found, cut) = scan_project(&root);
        let rel: Vec<String> = found
            .iter()
            .filter_map(|p| p.strip_prefix(&root).ok())
            .map(|p| p.display().to_string())
            .collect();
        assert!(!cut);
        assert_eq!(
            rel,
            [
                ".project/plan.md",
                "docs/release.plan.md",
                "outside/plans/c.md",
                "svc/plans/migrate.md"
            ]
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
