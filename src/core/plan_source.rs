//! A project's plan file as a task source (the seeds' `.project/plan.md`):
//! each open checkbox item (`- [ ] text`) is a task, and a task done ticks
//! its line (`- [x] text`). Pure: the daemon reads and writes the file
//! (`daemon::plan_source`).

use crate::core::tasks::MAX_TITLE_BYTES;

/// The open items' texts, in file order, each once; an item longer than a
/// task title may be is left out.
pub fn open_items(text: &str) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for line in text.lines() {
        if let Some(item) = open_item(line) {
            if item.len() <= MAX_TITLE_BYTES && !out.contains(&item) {
                out.push(item);
            }
        }
    }
    out
}

/// The text of `line` if it is an open checkbox item (`- [ ] text` or
/// `* [ ] text`, indented or not).
fn open_item(line: &str) -> Option<&str> {
    let rest = line.trim_start();
    let rest = rest
        .strip_prefix("- [ ] ")
        .or_else(|| rest.strip_prefix("* [ ] "))?;
    let item = rest.trim();
    (!item.is_empty()).then_some(item)
}

/// `text` with the first open item whose text is `title` ticked (`[x]`),
/// or `None` when there is none.
pub fn tick(text: &str, title: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut done = false;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        if !done && open_item(body) == Some(title) {
            if let Some(at) = line.find("[ ]") {
                out.push_str(&line[..at]);
                out.push_str("[x]");
                out.push_str(&line[at + 3..]);
                done = true;
                continue;
            }
        }
        out.push_str(line);
    }
    done.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "# Plan\n\n- [ ] write the parser\n- [x] set up CI\n  * [ ] nested item  \n- [ ]   \n- [ ] write the parser\nprose - [ ] not an item\n";

    #[test]
    fn open_checkbox_items_are_tasks_once_each() {
        assert_eq!(open_items(PLAN), ["write the parser", "nested item"]);
        let long = format!("- [ ] {}\n", "x".repeat(MAX_TITLE_BYTES + 1));
        assert!(open_items(&long).is_empty());
    }

    #[test]
    fn a_done_task_ticks_its_line_and_only_that() {
        let ticked = tick(PLAN, "nested item").expect("ticked");
        assert!(ticked.contains("  * [x] nested item  \n"));
        assert_eq!(ticked.len(), PLAN.len());
        assert_eq!(open_items(&ticked), ["write the parser"]);
        let once = tick(PLAN, "write the parser").expect("ticked");
        assert_eq!(once.matches("- [x] write the parser").count(), 1);
        assert_eq!(tick(PLAN, "set up CI"), None, "already ticked");
        assert_eq!(tick(PLAN, "no such item"), None);
    }
}
