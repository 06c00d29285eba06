//! A project's plan files and inbox as task sources (the seeds'
//! `.project/plan.md`, `**/*.plan.md`, `**/plans/*.md` and
//! `.project/inbox.md`): each open checkbox item (`- [ ] text`) of a plan
//! is a task, and a task done ticks its line (`- [x] text`); each `##`
//! header and list item of the inbox is a task, and the inbox is cleared
//! once read. Pure: the daemon finds, reads and writes the files
//! (`daemon::plan_source`).

use crate::core::tasks::MAX_TITLE_BYTES;

/// The open items' texts, in file order, each once; an item longer than a
/// task title may be is left out.
pub fn open_items(text: &str) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(item) = open_item(line) {
            if item.len() <= MAX_TITLE_BYTES && seen.insert(item) {
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

/// `text` without the line of the item `title`: its first open one, else
/// its first ticked one; `None` when there is neither (`task-remove`).
pub fn remove_item(text: &str, title: &str) -> Option<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let body = |l: &&str| l.trim_end_matches(['\n', '\r']).to_string();
    let at = lines
        .iter()
        .position(|l| open_item(&body(l)) == Some(title))
        .or_else(|| {
            lines
                .iter()
                .position(|l| checkbox_item(&body(l)) == Some(title))
        })?;
    let mut out = String::with_capacity(text.len());
    for (i, line) in lines.iter().enumerate() {
        if i != at {
            out.push_str(line);
        }
    }
    Some(out)
}

/// The text of `line` if it is a checkbox item, open or ticked.
fn checkbox_item(line: &str) -> Option<&str> {
    open_item(line).or_else(|| {
        let rest = line.trim_start();
        let rest = ["- [x] ", "* [x] ", "- [X] ", "* [X] "]
            .iter()
            .find_map(|p| rest.strip_prefix(p))?;
        let item = rest.trim();
        (!item.is_empty()).then_some(item)
    })
}

/// One task read from an inbox: a header's text and the prose under it,
/// or a list item's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxItem {
    pub title: String,
    pub description: String,
}

/// The tasks an inbox holds, in file order, each title once: every header
/// (`## text`, or deeper; `# text` is the document's title) with the prose lines under it as its description,
/// and every list item (`- text`, `* text`, `- [ ] text`; ticked ones
/// left out). A title longer than a task title may be is left out, a
/// description is cut at [`MAX_TITLE_BYTES`] on a character boundary.
pub fn inbox_items(text: &str) -> Vec<InboxItem> {
    let mut out: Vec<InboxItem> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // The header whose prose is being gathered, as an index into `out`.
    let mut header: Option<usize> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some((level, title)) = heading(trimmed) {
            // `# text` is the document's title, not a task.
            header = if level >= 2 {
                push_item(&mut out, &mut seen, title)
            } else {
                None
            };
            continue;
        }
        if let Some(title) = list_item(trimmed) {
            push_item(&mut out, &mut seen, title);
            header = None;
            continue;
        }
        if let Some(i) = header.filter(|_| !trimmed.is_empty()) {
            let description = &mut out[i].description;
            if !description.is_empty() {
                description.push('\n');
            }
            description.push_str(trimmed);
            cut_at_boundary(description, MAX_TITLE_BYTES);
        }
    }
    out
}

/// Adds a task titled `title` unless one is there already; its index.
fn push_item<'a>(
    out: &mut Vec<InboxItem>,
    seen: &mut std::collections::HashSet<&'a str>,
    title: &'a str,
) -> Option<usize> {
    if title.len() > MAX_TITLE_BYTES || !seen.insert(title) {
        return None;
    }
    out.push(InboxItem {
        title: title.to_string(),
        description: String::new(),
    });
    Some(out.len() - 1)
}

fn cut_at_boundary(text: &mut String, max: usize) {
    if text.len() > max {
        let at = (0..=max)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text.truncate(at);
    }
}

/// The level and text of a Markdown ATX heading (`# a` … `###### a`).
fn heading(line: &str) -> Option<(usize, &str)> {
    let hashes = line.bytes().take_while(|b| *b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = line.get(hashes..)?;
    if !rest.starts_with(' ') {
        return None;
    }
    let title = rest.trim().trim_end_matches('#').trim();
    (!title.is_empty()).then_some((hashes, title))
}

/// The text of a list item (`- text`, `* text`, an open `- [ ] text`); a
/// ticked item (`- [x] text`) is not one.
fn list_item(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("- ")
        .or_else(|| line.strip_prefix("* "))?;
    let rest = rest.trim_start();
    if rest.starts_with("[x]") || rest.starts_with("[X]") {
        return None;
    }
    let rest = rest.strip_prefix("[ ]").unwrap_or(rest).trim();
    (!rest.is_empty()).then_some(rest)
}

/// Whether `relative`, a path under a project directory (`/`-separated),
/// is one of the seeds' plan files: `.project/plan.md`, a file ending in
/// `.plan.md`, or a `.md` file in a directory named `plans`.
pub fn is_plan_path(relative: &str) -> bool {
    if relative == ".project/plan.md" {
        return true;
    }
    let mut parts = relative.rsplit('/');
    let file = parts.next().unwrap_or("");
    let parent = parts.next();
    let md = file.len() > 3 && file.ends_with(".md");
    file.len() > ".plan.md".len() && file.ends_with(".plan.md") || (md && parent == Some("plans"))
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

    #[test]
    fn an_inbox_gives_its_headers_with_their_prose_and_its_items() {
        let inbox = "# Inbox\n\n## Fix the login page\nIt 500s on a bad password.\nSee the log.\n\n- [ ] add a test\n* bump the version\n- [x] already done\n-not an item\n## Fix the login page\n## \n";
        let items = inbox_items(inbox);
        let got: Vec<(&str, &str)> = items
            .iter()
            .map(|i| (i.title.as_str(), i.description.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "Fix the login page",
                    "It 500s on a bad password.\nSee the log."
                ),
                ("add a test", ""),
                ("bump the version", ""),
            ]
        );
        // A description is cut on a character boundary.
        let long = format!("## t\n{}\n", "é".repeat(MAX_TITLE_BYTES));
        let items = inbox_items(&long);
        assert!(items[0].description.len() <= MAX_TITLE_BYTES);
        assert!(items[0].description.chars().all(|c| c == 'é'));
    }

    #[test]
    fn the_seeds_plan_paths_are_recognised() {
        for yes in [
            ".project/plan.md",
            "docs/release.plan.md",
            "a.plan.md",
            "plans/q3.md",
            "svc/plans/migrate.md",
        ] {
            assert!(is_plan_path(yes), "{yes}");
        }
        for no in [
            "plan.md",
            ".plan.md",
            "plans/.md",
            "plans/notes.txt",
            "plans.md",
            "x/plansx/a.md",
            ".project/inbox.md",
        ] {
            assert!(!is_plan_path(no), "{no}");
        }
    }

    #[test]
    fn a_removed_items_line_goes_and_nothing_else() {
        let removed = remove_item(PLAN, "write the parser").expect("removed");
        assert_eq!(
            removed,
            "# Plan\n\n- [x] set up CI\n  * [ ] nested item  \n- [ ]   \n- [ ] write the parser\nprose - [ ] not an item\n"
        );
        let ticked = remove_item(PLAN, "set up CI").expect("a ticked one too");
        assert!(!ticked.contains("set up CI"));
        // The open line goes before an older ticked one.
        let both = "- [x] again\n- [ ] again\n";
        assert_eq!(remove_item(both, "again").as_deref(), Some("- [x] again\n"));
        assert_eq!(remove_item(PLAN, "not an item"), None);
    }
}
